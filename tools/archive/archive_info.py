"""Read the settings packed in a built .mar without unpacking it."""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml

from tsvk.common import HandlerSettings, SettingsError

from ..errors import UsageError

MODEL_CONFIG_NAME = "model-config.yaml"
MODEL_VERSION = "1.0"  # every tsvk archive is built with this version; `tsvk config` names it in models=


def read_archive_settings(mar_path: Path) -> HandlerSettings:
    """The `tsvk` settings of an archive; a foreign or broken archive is a UsageError naming it."""
    try:
        with zipfile.ZipFile(mar_path) as archive:
            raw = yaml.safe_load(archive.read(MODEL_CONFIG_NAME))
    except (OSError, KeyError, zipfile.BadZipFile, yaml.YAMLError) as err:
        raise UsageError(f"{mar_path} is not a tsvk archive ({err}); rebuild it with `tsvk archive`") from err
    try:
        return HandlerSettings.from_model_yaml(raw)
    except SettingsError as err:
        raise UsageError(f"{mar_path}: {err}") from err


def handler_differences(mar_path: Path, package: Path) -> list[str]:
    """The run-time package's files (tsvk/...py) that differ between an archive and `package` in this
    checkout: changed, missing from either side. Empty when the archive serves this checkout's handler;
    a run that measures the handler must know which one it measured."""
    try:
        with zipfile.ZipFile(mar_path) as archive:
            packed = {name: archive.read(name) for name in archive.namelist()
                      if name.startswith(f"{package.name}/") and name.endswith(".py")}
    except (OSError, zipfile.BadZipFile) as err:
        raise UsageError(f"{mar_path} is not a readable .mar ({err}); rebuild it with `tsvk archive`") from err
    local = {f"{package.name}/{path.relative_to(package).as_posix()}": path.read_bytes()
             for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    return sorted(name for name in packed.keys() | local.keys() if packed.get(name) != local.get(name))


def list_archives(model_store: Path) -> dict[str, Path]:
    """Model name -> .mar path for every archive in the store, sorted by name."""
    return {p.stem: p for p in sorted(Path(model_store).glob("*.mar"))}
