"""A model archive (.mar) read one way by everything that opens one: the build's checks, both engines' start, the Open
Inference Protocol's tensors, `tsvk batch`, the doctor.

A .mar is a zip that a server unpacks and then runs, and it may come from anywhere a model store is filled from, so
it is read within bounds before a byte of it is written: its directory is checked when it is opened (member names
that would leave the archive's directory, a large member that deflates like a zip bomb, members that would unpack to
more than a bound in all), and unpacking counts again what it writes (a header may lie, a member's data may be
corrupt, the disk may fill) and leaves nothing behind when it fails. `ArchiveError` says what was wrong in words a
refusal line can carry.
"""

from __future__ import annotations

import json
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from tsvk.common import HandlerSettings, SettingsError, labels_from_mapping

from .. import defaults

MANIFEST = "MAR-INF/MANIFEST.json"
SETTINGS_FILE = "model-config.yaml"  # where torch-model-archiver's --config-file lands, unless the manifest names another
MAX_UNPACKED_KEY = "tsvk.engine.max_unpacked_mb"  # config.properties: what one archive may unpack to, MiB
MB = 2**20
COPY_CHUNK = MB  # bytes read and written at a time while unpacking
_READ_ERRORS = (OSError, KeyError, ValueError, EOFError, zlib.error, zipfile.BadZipFile)


class ArchiveError(Exception):
    """Why an archive cannot be read or unpacked, as a clause a refusal line can end with."""


@dataclass(frozen=True)
class ArchiveBounds:
    """What opening and unpacking one archive may cost."""

    max_unpacked_bytes: int = defaults.ENGINE_MAX_UNPACKED_MB * MB
    max_member_ratio: int = defaults.ENGINE_MAX_MEMBER_RATIO  # a larger member deflating more is a zip bomb
    ratio_from_bytes: int = defaults.ENGINE_RATIO_FROM_MB * MB  # members up to this size are not measured
    disk_reserve_bytes: int = defaults.ENGINE_DISK_RESERVE_MB * MB  # left free on the disk unpacked onto


class ModelArchive:
    """One .mar, its directory checked within `bounds` and its manifest read ({} where it has none: TorchServe cannot
    serve it, and each reader says so in its own words); members read or unpacked on demand."""

    def __init__(self, path: Path, bounds: ArchiveBounds = ArchiveBounds()):
        self.path, self.bounds = Path(path), bounds
        try:
            with zipfile.ZipFile(self.path) as mar:
                self.members = mar.infolist()
                _check_directory(self.members, bounds)
                self.manifest = json.loads(mar.read(MANIFEST)) if MANIFEST in mar.namelist() else {}
        except FileNotFoundError:
            raise ArchiveError("the archive is not in the model store") from None
        except _READ_ERRORS as err:
            raise ArchiveError(f"not a readable model archive ({type(err).__name__}: {err})") from None
        self.names = {member.filename for member in self.members}

    def python_files(self) -> dict[str, bytes]:
        """The archive's .py files by name (what a reader checks the handler against)."""
        return {name: self.read(name) for name in sorted(self.names) if name.endswith(".py")}

    @property
    def handler(self) -> str:
        """The manifest's handler: a file of the archive (tsvk's), or the name of one of TorchServe's own."""
        return str(self.manifest.get("model", {}).get("handler", ""))

    @property
    def settings_file(self) -> str:
        return self.manifest.get("model", {}).get("configFile") or SETTINGS_FILE

    def read(self, name: str) -> bytes:
        try:
            with zipfile.ZipFile(self.path) as mar:
                return mar.read(name)
        except _READ_ERRORS as err:
            raise ArchiveError(f"its member {name} cannot be read ({type(err).__name__}: {err})") from None

    def settings(self) -> HandlerSettings:
        """The `tsvk` settings the archive carries (a foreign archive has none: ArchiveError)."""
        try:
            return HandlerSettings.from_model_yaml(yaml.safe_load(self.read(self.settings_file)))
        except (yaml.YAMLError, SettingsError, ArchiveError) as err:
            raise ArchiveError(f"its settings {self.settings_file} cannot be read ({type(err).__name__}: {err})") from None

    def label_count(self, labels_file: str) -> int | None:
        """Classes the archive's label file names; None without one or where it cannot be read."""
        try:
            return len(labels_from_mapping(json.loads(self.read(labels_file))))
        except (ArchiveError, ValueError):
            return None

    def unpack(self, directory: Path) -> None:
        """Every member under `directory` (replacing what was there), within the bounds; on any failure nothing is left."""
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, mode=0o700)
        try:
            _check_disk(self.members, directory, self.bounds)
            with zipfile.ZipFile(self.path) as mar:
                _extract_all(mar, directory, self.bounds.max_unpacked_bytes)
        except ArchiveError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        except _READ_ERRORS as err:
            shutil.rmtree(directory, ignore_errors=True)
            raise ArchiveError(f"it could not be unpacked ({type(err).__name__}: {err})") from None


def _check_directory(members: list[zipfile.ZipInfo], bounds: ArchiveBounds) -> None:
    """Refuse, before anything is written, a member that would land outside the archive's directory, one that
    deflates like a zip bomb, and members that unpack to more than the bound in all."""
    for member in members:
        _check_name(member.filename)
        _check_ratio(member, bounds)
    total = sum(member.file_size for member in members)
    if total > bounds.max_unpacked_bytes:
        raise ArchiveError(f"it would unpack to {total / MB:.0f} MiB, over the {bounds.max_unpacked_bytes / MB:.0f} MiB allowed "
                           f"({MAX_UNPACKED_KEY} in the config raises it)")


def _check_name(name: str) -> None:
    """zipfile would quietly rewrite such a name while the manifest, and so the worker, would still use it as is."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise ArchiveError(f"its member {name!r} would be unpacked outside the archive's directory; "
                           "members must be relative paths with no '..', '\\' or NUL")


def _check_ratio(member: zipfile.ZipInfo, bounds: ArchiveBounds) -> None:
    if member.file_size <= bounds.ratio_from_bytes:
        return
    ratio = member.file_size / max(member.compress_size, 1)
    if ratio > bounds.max_member_ratio:
        raise ArchiveError(f"its member {member.filename} would unpack {ratio:.0f}x its compressed size "
                           f"({member.file_size / MB:.0f} MiB), over the {bounds.max_member_ratio}x allowed: "
                           "a zip bomb, not a model archive")


def _check_disk(members: list[zipfile.ZipInfo], directory: Path, bounds: ArchiveBounds) -> None:
    """Refuse an archive that would leave less than the reserve free on the disk it is unpacked onto."""
    needed = sum(member.file_size for member in members) + bounds.disk_reserve_bytes
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise ArchiveError(f"unpacking it needs {needed / MB:.0f} MiB free on {directory.parent} "
                           f"({bounds.disk_reserve_bytes / MB:.0f} MiB kept for logs), {free / MB:.0f} MiB are; "
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
                raise ArchiveError(f"its member {member.filename} unpacks to more than the {allowed} bytes "
                                   "its zip directory and the archive's bound allow")
            out.write(chunk)
    return written
