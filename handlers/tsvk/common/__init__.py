"""The ground floor every room stands on: the settings schema (the contract with tools/), the task facts it
validates, the defaults, request errors, labels, feature probes, the Java-properties reader and the served config.

Nothing here imports another room. Like every room's `__init__`, `__all__` is what tools/ may import from it.
"""

from . import defaults, features
from .errors import ERROR_SOURCE, BadRequest, RequestError, RequestTooLarge, ServerStopping
from .labels import label_for, labels_from_mapping, load_labels
from .properties import PropertiesEntry, escape_value, read_properties, read_properties_entries
from .served_config import TORCHSERVE, TUNED_KEY_PREFIX, ModelEntry, ServedConfig
from .settings import (ARTIFACT_FORMATS, DEVICES, INTERPOLATIONS, PRECISIONS, SETTINGS_KEY, TASKS, ArtifactSettings,
                       DetectSettings, HandlerSettings, ModelSource, PreprocessSettings, RuntimeSettings, ServingDefaults,
                       SettingsError)
from .task_kinds import TASKS as TASK_KINDS, TaskKind, task_kind

__all__ = [
    "ARTIFACT_FORMATS", "DEVICES", "ERROR_SOURCE", "INTERPOLATIONS", "PRECISIONS", "SETTINGS_KEY", "TASKS",
    "TASK_KINDS", "TORCHSERVE", "TUNED_KEY_PREFIX", "ArtifactSettings", "BadRequest", "DetectSettings",
    "HandlerSettings", "ModelEntry", "ModelSource", "PreprocessSettings", "PropertiesEntry", "RequestError",
    "RequestTooLarge", "RuntimeSettings", "ServedConfig", "ServerStopping", "ServingDefaults", "SettingsError",
    "TaskKind", "defaults", "escape_value", "features", "label_for", "labels_from_mapping", "load_labels",
    "read_properties", "read_properties_entries", "task_kind",
]
