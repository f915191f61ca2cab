"""The archives a TorchServe config names, checked and unpacked for the engine's workers; the ones it cannot serve
refused with one line each, naming the archive and why.

The engine serves tsvk archives as they are: their `tsvk` package, handler module and artifact, unpacked into the
run directory the way TorchServe unpacks them into its temp directory. An archive whose manifest names one of
TorchServe's stock handlers (`image_classifier`, a module TorchServe ships), a handler that is not tsvk's, or an
artifact the archive does not hold cannot be served here; the others still start. A model of the config whose name
breaks torch-model-archiver's rule (tools/limits.py), or whose `marName` is not a file name of the model store, is
refused the same way: its name becomes a directory of the run directory and its archive a path of the store, so
neither may lead elsewhere.

Unpacking is bounded: an archive that is not a readable zip, whose members would unpack to more than
`tsvk.engine.max_unpacked_mb` in all, one of whose large members deflates more than a zip bomb's ratio, whose member
names leave its directory, or that would leave less than a reserve free on the disk is refused from the zip's
directory, before a byte is written; what is written is counted again (a header may lie, a member's data may be
corrupt, the disk may fill first), and an archive refused while unpacking leaves no directory behind.
"""

from __future__ import annotations

import compileall
import json
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from tsvk.common import HandlerSettings, ModelEntry, ServedConfig, SettingsError

from ... import defaults
from ...limits import model_name_problem

MANIFEST = "MAR-INF/MANIFEST.json"
TSVK_SERVICES = (
    "tsvk/worker/service.py",
    "tsvk/service.py",
)  # the run-time package every tsvk archive carries (the second: packed before it had rooms)
TSVK_HANDLER = "tsvk/handler.py"
MAX_UNPACKED_KEY = "tsvk.engine.max_unpacked_mb"  # config.properties: what one archive may unpack to, MiB
MB = 2**20
COPY_CHUNK = MB  # bytes read and written at a time while unpacking


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
            served.append(_open(config.archive_of(model), model, unpack_to / model.name, config.job_queue_size, gpus, limit))
        except ArchiveRefused as err:
            refused.append(Refusal(config.archive_of(model), str(err)))
    return served, refused


class ArchiveRefused(Exception):
    """Why the engine cannot serve an archive."""


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
        _servable(archive, limit)
    except ArchiveRefused as err:
        return str(err)
    return None


def _open(archive: Path, model: ModelEntry, directory: Path, queue_size: int, gpus: tuple[int, ...], limit: int) -> ServedModel:
    handler, settings_file, settings = _servable(archive, limit)
    _unpack(archive, directory, limit)
    return ServedModel(model.name, model.version, archive, directory, handler, settings_file, settings, model.workers,
                       model.batch_size, model.max_batch_delay_ms, model.response_timeout_s, queue_size, gpus,
                       model.startup_timeout_s)


def _servable(archive: Path, limit: int) -> tuple[str, str, HandlerSettings]:
    """The archive's handler file, settings file and settings, once it is one this engine serves; else ArchiveRefused."""
    manifest, names = _read(archive, limit)
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


def _read(archive: Path, limit: int) -> tuple[dict, set[str]]:
    """The manifest and member names, once the zip's directory says unpacking it stays within bounds."""
    try:
        with zipfile.ZipFile(archive) as mar:
            _check_directory(mar.infolist(), limit)
            return json.loads(mar.read(MANIFEST)), set(mar.namelist())
    except FileNotFoundError:
        raise ArchiveRefused("the archive is not in the model store") from None
    except (OSError, KeyError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        raise ArchiveRefused(f"not a readable model archive ({type(err).__name__}: {err})") from None


def _check_directory(members: list[zipfile.ZipInfo], limit: int) -> None:
    """Refuse, before anything is written, a member that would land outside the archive's directory, one that
    deflates like a zip bomb, and members that unpack to more than `limit` bytes in all."""
    for member in members:
        _check_name(member.filename)
        _check_ratio(member)
    total = sum(member.file_size for member in members)
    if total > limit:
        raise ArchiveRefused(f"it would unpack to {total / MB:.0f} MiB, over the {limit / MB:.0f} MiB allowed "
                             f"({MAX_UNPACKED_KEY} in the config raises it)")


def _check_name(name: str) -> None:
    """zipfile would quietly rewrite such a name while the manifest, and so the worker, would still use it as is."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise ArchiveRefused(f"its member {name!r} would be unpacked outside the archive's directory; "
                             "members must be relative paths with no '..', '\\' or NUL")


def _check_ratio(member: zipfile.ZipInfo) -> None:
    if member.file_size <= defaults.ENGINE_RATIO_FROM_MB * MB:
        return
    ratio = member.file_size / max(member.compress_size, 1)
    if ratio > defaults.ENGINE_MAX_MEMBER_RATIO:
        raise ArchiveRefused(f"its member {member.filename} would unpack {ratio:.0f}x its compressed size "
                             f"({member.file_size / MB:.0f} MiB), over the {defaults.ENGINE_MAX_MEMBER_RATIO}x allowed: "
                             "a zip bomb, not a model archive")


def _settings(archive: Path, settings_file: str) -> HandlerSettings:
    try:
        with zipfile.ZipFile(archive) as mar:
            return HandlerSettings.from_model_yaml(yaml.safe_load(mar.read(settings_file)))
    except (KeyError, yaml.YAMLError, SettingsError) as err:
        raise ArchiveRefused(f"its settings {settings_file} cannot be read ({type(err).__name__}: {err})") from None


def _unpack(archive: Path, directory: Path, limit: int) -> None:
    """The archive's files under `directory`, replacing an earlier unpacking (a restart serves the archive as it is now),
    and its Python compiled there once. Freshly unpacked sources have no bytecode, so every worker would compile the
    archive's tsvk at its start (tens of milliseconds each, on the way to its first answer); here the server compiles
    them while the fork server is still importing torch. A file that does not compile is left to the worker, whose
    refusal then names the error. An archive refused while unpacking leaves no directory: a worker never starts on
    half an archive."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)
    try:
        with zipfile.ZipFile(archive) as mar:
            _check_disk(mar.infolist(), directory)
            _extract_all(mar, directory, limit)
    except ArchiveRefused:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        shutil.rmtree(directory, ignore_errors=True)
        raise ArchiveRefused(f"it could not be unpacked ({type(err).__name__}: {err})") from None
    compileall.compile_dir(directory, quiet=2)


def _check_disk(members: list[zipfile.ZipInfo], directory: Path) -> None:
    """Refuse an archive that would leave less than the reserve free on the run directory's disk."""
    needed = sum(member.file_size for member in members) + defaults.ENGINE_DISK_RESERVE_MB * MB
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise ArchiveRefused(f"unpacking it needs {needed / MB:.0f} MiB free on {directory.parent} "
                             f"({defaults.ENGINE_DISK_RESERVE_MB} MiB kept for logs), {free / MB:.0f} MiB are; "
                             "free some space or choose another --run-dir")


def _extract_all(mar: zipfile.ZipFile, directory: Path, limit: int) -> None:
    left = limit
    for member in mar.infolist():
        left -= _extract(mar, member, directory / member.filename, min(member.file_size, left))


def _extract(mar: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path, allowed: int) -> int:
    """One member written to `target`, refused once it passes `allowed` bytes (its directory's size, or what is left
    of the archive's bound): the directory is what was checked, so the data may not say more. Its byte count."""
    if member.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with mar.open(member) as source, open(target, "wb") as out:
        while chunk := source.read(COPY_CHUNK):
            written += len(chunk)
            if written > allowed:
                raise ArchiveRefused(f"its member {member.filename} unpacks to more than the {allowed} bytes "
                                     "its zip directory and the archive's bound allow")
            out.write(chunk)
    return written
