"""Read the settings packed in a built .mar without unpacking it."""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml

from tsvk.settings import HandlerSettings, SettingsError

from .errors import UsageError

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


def list_archives(model_store: Path) -> dict[str, Path]:
    """Model name -> .mar path for every archive in the store, sorted by name."""
    return {p.stem: p for p in sorted(Path(model_store).glob("*.mar"))}
