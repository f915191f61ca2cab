"""The archives a TorchServe config names, checked and unpacked for the engine's workers; the ones it cannot serve
refused with one line each, naming the archive and why.

The engine serves tsvk archives as they are: their `tsvk` package, handler module and artifact, unpacked into the
run directory the way TorchServe unpacks them into its temp directory. An archive whose manifest names one of
TorchServe's stock handlers (`image_classifier`, a module TorchServe ships), a handler that is not tsvk's, or an
artifact the archive does not hold cannot be served here; the others still start.
"""

from __future__ import annotations

import compileall
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from tsvk.common import HandlerSettings, SettingsError

from ... import defaults

MANIFEST = "MAR-INF/MANIFEST.json"
TSVK_SERVICES = (
    "tsvk/worker/service.py",
    "tsvk/service.py",
)  # the run-time package every tsvk archive carries (the second: packed before it had rooms)
TSVK_HANDLER = "tsvk/handler.py"
DEFAULT_QUEUE_SIZE = 100  # TorchServe 0.12's job_queue_size when the config has none


@dataclass(frozen=True)
class ServedModel:
    """One model as the engine serves it: the unpacked archive and the numbers the config gives it."""

    name: str
    version: str
    archive: Path
    directory: Path
    handler: str  # the manifest's handler file, e.g. image_classifier.py
    settings_file: str  # the manifest's config file, model-config.yaml
    settings: HandlerSettings
    workers: int
    batch_size: int
    max_batch_delay_ms: int
    response_timeout_s: int
    queue_size: int
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Refusal:
    archive: Path
    reason: str

    def line(self) -> str:
        return f"not serving {self.archive.name}: {self.reason}"


def open_archives(properties: dict[str, str], unpack_to: Path) -> tuple[list[ServedModel], list[Refusal]]:
    """Every model of the config's `models`, unpacked under `unpack_to`, or refused."""
    store = Path(properties.get("model_store", defaults.MODEL_STORE))
    queue_size = int(properties.get("job_queue_size", DEFAULT_QUEUE_SIZE))
    gpus = tuple(range(int(properties.get("number_of_gpu", 0) or 0)))
    served, refused = [], []
    for name, versions in _models(properties).items():
        version, entry = next(iter(versions.items()))
        archive = store / entry.get("marName", f"{name}.mar")
        try:
            served.append(_open(archive, name, version, entry, unpack_to / name, queue_size, gpus))
        except ArchiveRefused as err:
            refused.append(Refusal(archive, str(err)))
    return served, refused


class ArchiveRefused(Exception):
    """Why the engine cannot serve an archive."""


def _models(properties: dict[str, str]) -> dict[str, dict]:
    try:
        models = json.loads(properties.get("models") or "{}")
    except ValueError as err:
        raise ArchiveRefused(f"the config's models= is not JSON: {err}") from None
    return {name: versions for name, versions in models.items() if isinstance(versions, dict) and versions}


def refusal_reason(archive: Path) -> str | None:
    """Why the engine would refuse `archive` at start (what its one-line refusal says after the name); None: it serves it."""
    try:
        _servable(archive)
    except ArchiveRefused as err:
        return str(err)
    return None


def _open(archive: Path, name: str, version: str, entry: dict, directory: Path, queue_size: int, gpus: tuple[int, ...]) -> ServedModel:
    handler, settings_file, settings = _servable(archive)
    _unpack(archive, directory)
    return ServedModel(
        name,
        version,
        archive,
        directory,
        handler,
        settings_file,
        settings,
        int(entry.get("minWorkers", 1)),
        int(entry.get("batchSize", 1)),
        int(entry.get("maxBatchDelay", 100)),
        int(entry.get("responseTimeout", defaults.RESPONSE_TIMEOUT_S)),
        queue_size,
        gpus,
    )


def _servable(archive: Path) -> tuple[str, str, HandlerSettings]:
    """The archive's handler file, settings file and settings, once it is one this engine serves; else ArchiveRefused."""
    manifest, names = _read(archive)
    model = manifest.get("model", {})
    handler, settings_file = model.get("handler", ""), model.get("configFile") or "model-config.yaml"
    if handler not in names:
        raise ArchiveRefused(
            f"its handler {handler!r} is TorchServe's own (stock) handler, not a file in the archive; "
            "this engine serves tsvk handlers: build the archive with `tsvk archive`"
        )
    if not any(service in names for service in TSVK_SERVICES) or TSVK_HANDLER not in names:
        raise ArchiveRefused(
            f"its handler {handler} is not a tsvk handler (the archive holds no tsvk package); "
            "serve it with TorchServe, or build it with `tsvk archive`"
        )
    settings = _settings(archive, settings_file)
    if settings.artifact.file not in names:
        raise ArchiveRefused(f"its artifact {settings.artifact.file} is missing from the archive")
    return handler, settings_file, settings


def _read(archive: Path) -> tuple[dict, set[str]]:
    try:
        with zipfile.ZipFile(archive) as mar:
            return json.loads(mar.read(MANIFEST)), set(mar.namelist())
    except FileNotFoundError:
        raise ArchiveRefused("the archive is not in the model store") from None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        raise ArchiveRefused(f"not a readable model archive ({type(err).__name__}: {err})") from None


def _settings(archive: Path, settings_file: str) -> HandlerSettings:
    try:
        with zipfile.ZipFile(archive) as mar:
            return HandlerSettings.from_model_yaml(yaml.safe_load(mar.read(settings_file)))
    except (KeyError, yaml.YAMLError, SettingsError) as err:
        raise ArchiveRefused(f"its settings {settings_file} cannot be read ({type(err).__name__}: {err})") from None


def _unpack(archive: Path, directory: Path) -> None:
    """The archive's files under `directory`, replacing an earlier unpacking (a restart serves the archive as it is now),
    and its Python compiled there once. Freshly unpacked sources have no bytecode, so every worker would compile the
    archive's tsvk at its start (tens of milliseconds each, on the way to its first answer); here the server compiles
    them while the fork server is still importing torch. A file that does not compile is left to the worker, whose
    refusal then names the error."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)
    with zipfile.ZipFile(archive) as mar:
        mar.extractall(directory)
    compileall.compile_dir(directory, quiet=2)
