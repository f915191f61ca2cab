"""Read the settings packed in a built .mar without unpacking it."""

from __future__ import annotations

from pathlib import Path

from tsvk.common import HandlerSettings

from ..errors import UsageError
from .mar import SETTINGS_FILE, ArchiveError, ModelArchive

MODEL_CONFIG_NAME = SETTINGS_FILE
MODEL_VERSION = "1.0"  # every tsvk archive is built with this version; `tsvk config` names it in models=


def read_archive_settings(mar_path: Path) -> HandlerSettings:
    """The `tsvk` settings of an archive; a foreign or broken archive is a UsageError naming it."""
    try:
        return ModelArchive(mar_path).settings()
    except ArchiveError as err:
        raise UsageError(f"{mar_path} is not a tsvk archive: {err}; rebuild it with `tsvk archive`") from err


def handler_differences(mar_path: Path, package: Path, handler: Path | None = None) -> list[str]:
    """The run-time package's files (tsvk/...py), and the handler module where given, that differ between an archive
    and this checkout: changed, missing from either side. Empty when the archive serves this checkout's handler; a run
    that measures the handler must know which one it measured, and an archive serves its own copy of the handler."""
    try:
        packed = {name: data for name, data in ModelArchive(mar_path).python_files().items()
                  if name.startswith(f"{package.name}/") or (handler is not None and name == handler.name)}
    except ArchiveError as err:
        raise UsageError(f"{mar_path} is not a readable .mar ({err}); rebuild it with `tsvk archive`") from err
    local = {f"{package.name}/{path.relative_to(package).as_posix()}": path.read_bytes()
             for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    if handler is not None:
        local[handler.name] = handler.read_bytes()
    return sorted(name for name in packed.keys() | local.keys() if packed.get(name) != local.get(name))


def list_archives(model_store: Path) -> dict[str, Path]:
    """Model name -> .mar path for every archive in the store, sorted by name."""
    return {p.stem: p for p in sorted(Path(model_store).glob("*.mar"))}
