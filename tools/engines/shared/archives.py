"""The archives a TorchServe config names, checked and unpacked for the engine's workers; the ones it cannot serve
refused with one line each, naming the archive and why.

The engine serves tsvk archives as they are: their `tsvk` package, handler module and artifact, unpacked into the
run directory the way TorchServe unpacks them into its temp directory. An archive whose manifest names one of
TorchServe's stock handlers (`image_classifier`, a module TorchServe ships), a handler that is not tsvk's, or an
artifact the archive does not hold cannot be served here; the others still start. A model of the config whose name
breaks torch-model-archiver's rule (tools/limits.py), or whose `marName` is not a file name of the model store, is
refused the same way: its name becomes a directory of the run directory and its archive a path of the store, so
neither may lead elsewhere.

Reading and unpacking are bounded as for every reader of an archive (tools/archive/mar.py): what one archive may
unpack to is the config's `tsvk.engine.max_unpacked_mb`.
"""

from __future__ import annotations

import compileall
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from tsvk.common import HandlerSettings, ModelEntry, ServedConfig

from ... import defaults
from ...archive.mar import MANIFEST, MAX_UNPACKED_KEY, MB, ArchiveBounds, ArchiveError, ModelArchive
from ...limits import model_name_problem

TSVK_SERVICES = (
    "tsvk/worker/service.py",
    "tsvk/service.py",
)  # the run-time package every tsvk archive carries (the second: packed before it had rooms)
TSVK_HANDLER = "tsvk/handler.py"


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
    startup_timeout_s: float = defaults.STARTUP_TIMEOUT_S  # a worker that has not loaded by then is given up
    worker_properties: Mapping[str, str] = field(default_factory=dict)  # what its workers read of the config (for_worker)


@dataclass(frozen=True)
class Refusal:
    archive: Path
    reason: str
    shown: str = ""  # what the line names when the archive's file name would not say it (a refused entry)

    def line(self) -> str:
        """One line, even where the reason was several (a settings error lists each problem on a line of its own)."""
        return f"not serving {self.shown or self.archive.name}: {' '.join(self.reason.split())}"


def open_archives(properties: dict[str, str], unpack_to: Path) -> tuple[list[ServedModel], list[Refusal]]:
    """Every model of the config's `models`, unpacked under `unpack_to`, or refused (an entry the config's reader
    could not read is refused by what it says)."""
    config = ServedConfig.of(properties)
    gpus = tuple(range(config.integer("number_of_gpu", 0)))
    limit = max_unpacked_bytes(properties)
    served, refused = [], [Refusal(Path(), problem, shown="models=") for problem in config.problems]
    for model in config.models:
        problem = model_name_problem(model.name) or mar_name_problem(model.mar_name)
        if problem is not None:
            refused.append(Refusal(Path(), problem, shown=f"model {model.name!r}"))
            continue
        try:
            served.append(_open(config.archive_of(model), model, unpack_to / model.name, config, gpus, limit))
        except ArchiveError as err:
            refused.append(Refusal(config.archive_of(model), str(err)))
    return served, refused


class ArchiveRefused(ArchiveError):
    """Why the engine cannot serve an archive it could read."""


def mar_name_problem(mar_name: object) -> str | None:
    """Why a `marName` cannot name an archive of the model store (it would reach a file elsewhere), or None."""
    if isinstance(mar_name, str) and _is_file_name(mar_name):
        return None
    return (f"marName {mar_name!r} is not allowed: it must be the file name of an archive in the model store, "
            "with no '/', '\\', NUL, and not '.' or '..'")


def _is_file_name(name: str) -> bool:
    """One entry of one directory: no separator, NUL, nor the directory itself or its parent."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def max_unpacked_bytes(properties: dict[str, str]) -> int:
    """What one archive may unpack to: the config's `tsvk.engine.max_unpacked_mb`, else tsvk's default."""
    value = properties.get(MAX_UNPACKED_KEY, "").strip() or str(defaults.ENGINE_MAX_UNPACKED_MB)
    if not value.isdigit() or int(value) < 1:
        raise ArchiveRefused(f"{MAX_UNPACKED_KEY} must be a whole number of MiB, at least 1, got {value!r}")
    return int(value) * MB


def refusal_reason(archive: Path, limit: int = defaults.ENGINE_MAX_UNPACKED_MB * MB) -> str | None:
    """Why the engine would refuse `archive` at start (what its one-line refusal says after the name); None: it serves it."""
    try:
        _servable(ModelArchive(archive, ArchiveBounds(max_unpacked_bytes=limit)))
    except ArchiveError as err:
        return str(err)
    return None


def _open(path: Path, model: ModelEntry, directory: Path, config: ServedConfig, gpus: tuple[int, ...], limit: int) -> ServedModel:
    """The archive checked, unpacked, and its Python compiled there once. Freshly unpacked sources have no bytecode, so
    every worker would compile the archive's tsvk at its start (tens of milliseconds each, on the way to its first
    answer); here the server compiles them while the fork server is still importing torch. A file that does not
    compile is left to the worker, whose refusal then names the error."""
    archive = ModelArchive(path, ArchiveBounds(max_unpacked_bytes=limit))
    settings = _servable(archive)
    archive.unpack(directory)
    compileall.compile_dir(directory, quiet=2)
    return ServedModel(model.name, model.version, path, directory, archive.handler, archive.settings_file, settings, model.workers,
                       model.batch_size, model.max_batch_delay_ms, model.response_timeout_s, config.job_queue_size, gpus,
                       model.startup_timeout_s, config.for_worker(model.name))


def _servable(archive: ModelArchive) -> HandlerSettings:
    """The archive's settings, once it is one this engine serves; else ArchiveRefused."""
    if not archive.manifest:
        raise ArchiveRefused(f"not a readable model archive (it has no {MANIFEST})")
    if archive.handler not in archive.names:
        raise ArchiveRefused(
            f"its handler {archive.handler!r} is TorchServe's own (stock) handler, not a file in the archive; "
            "this engine serves tsvk handlers: build the archive with `tsvk archive`"
        )
    if not any(service in archive.names for service in TSVK_SERVICES) or TSVK_HANDLER not in archive.names:
        raise ArchiveRefused(
            f"its handler {archive.handler} is not a tsvk handler (the archive holds no tsvk package); "
            "serve it with TorchServe, or build it with `tsvk archive`"
        )
    settings = archive.settings()
    if settings.artifact.file not in archive.names:
        raise ArchiveRefused(f"its artifact {settings.artifact.file} is missing from the archive")
    return settings
