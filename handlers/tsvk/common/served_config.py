"""A served config.properties as one value: its models with their archive and numbers, its limits and addresses.

TorchServe's frontend and tsvk's engine serve the same file, and tsvk's tools (doctor, status, predict, the OIP
front), the engine and the worker each need some of it. They read it here, once, into `ServedConfig`: the `models=`
JSON is parsed in this module and nowhere else, each `models=` field is read with TorchServe's own default where the
entry leaves it out (wlm/ModelManager.java and ConfigManager.java, v0.12.0), and a `models=` value TorchServe would
refuse is reported as `problem` rather than raised, so a reader that only needs the addresses still gets them.

The package ships inside every archive, so this module imports nothing outside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .defaults import RESPONSE_TIMEOUT_S
from .properties import read_properties

MODELS_KEY = "models"
SNAPSHOT_KEY = "model_snapshot"  # KServe's TorchServe configs: {"models": {...}} inside it, read where `models` is absent
MODEL_STORE_KEY = "model_store"
TSVK_KEY_PREFIX = "tsvk."  # tsvk's own keys: tsvk.<setting>.<model> for one model, tsvk.<setting> for all
# What a worker's service reads of the config beside its model's tsvk keys (worker/deadline.py: the response timeout)
WORKER_KEYS = ("default_response_timeout",)
TUNED_KEY_PREFIX = "tsvk.tuned."  # tsvk.tuned.<model>=<what `tsvk tune` measured for the numbers of its models= entry>


@dataclass(frozen=True)
class TorchServeDefaults:
    """TorchServe 0.12.0's values where config.properties or a `models=` entry says nothing (ConfigManager.java's
    getters, ModelManager.java): its own, not tsvk's (tsvk's generator writes every one of them)."""

    workers: int = 1
    batch_size: int = 1
    max_batch_delay_ms: int = 100
    response_timeout_s: int = RESPONSE_TIMEOUT_S
    startup_timeout_s: int = 120
    job_queue_size: int = 100
    max_request_size: int = 6_553_500
    model_store: str = "model_store"


TORCHSERVE = TorchServeDefaults()

@dataclass(frozen=True)
class ModelEntry:
    """One model of `models=`: its first (default) version, with TorchServe's defaults for what the entry leaves out."""

    name: str
    version: str
    mar_name: str
    workers: int
    batch_size: int
    max_batch_delay_ms: int
    response_timeout_s: int
    startup_timeout_s: int
    fields: Mapping[str, Any] = field(default_factory=dict)  # the entry as written (doctor names what it says)

    def archive(self, model_store: Path) -> Path:
        return Path(model_store) / self.mar_name


@dataclass(frozen=True)
class ServedConfig:
    """What a config.properties serves. `properties` keeps every key as Java reads it, for what has no field."""

    properties: Mapping[str, str]
    models: tuple[ModelEntry, ...] = ()
    problems: tuple[str, ...] = ()  # what of `models=` could not be read (TorchServe refuses such a config), each alone

    @property
    def problem(self) -> str | None:
        """Every problem on one line; None where `models=` was read whole."""
        return "; ".join(self.problems) or None

    @property
    def models_key(self) -> str:
        """The key the models come from: `models`, or `model_snapshot` where only that is set."""
        return MODELS_KEY if self.properties.get(MODELS_KEY) or not self.properties.get(SNAPSHOT_KEY) else SNAPSHOT_KEY

    @classmethod
    def read(cls, path: Path) -> ServedConfig:
        return cls.of(read_properties(Path(path)))

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> ServedConfig:
        models, problems = _models(properties)
        return cls(dict(properties), models, problems)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.properties.get(key, default)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    def tuned(self, name: str) -> str | None:
        """What `tsvk tune` measured for this model's numbers; None where they were planned, not measured."""
        return self.properties.get(TUNED_KEY_PREFIX + name) or None

    def model(self, name: str) -> ModelEntry | None:
        return next((m for m in self.models if m.name == name), None)

    def for_worker(self, name: str) -> dict[str, str]:
        """What one model's worker reads of this config, as properties: its `models=` entry alone, tsvk's keys for it
        (threads, deadline, ...), and WORKER_KEYS. A server hands this to the worker it starts, so the worker never
        reads the file again (TorchServe's workers, which get nothing from their frontend, still do)."""
        own = {key: value for key, value in self.properties.items()
               if key.startswith(TSVK_KEY_PREFIX) and key.endswith("." + name) or key in WORKER_KEYS}
        entry = self.model(name)
        if entry is not None:
            own[MODELS_KEY] = json.dumps({name: {entry.version: dict(entry.fields)}}, sort_keys=True)
        return own

    @property
    def model_store(self) -> Path:
        return Path(self.properties.get(MODEL_STORE_KEY) or TORCHSERVE.model_store)

    def archive_of(self, model: ModelEntry) -> Path:
        return model.archive(self.model_store)

    def integer(self, key: str, default: int) -> int:
        return _integer(self.properties, key, default)

    def max_request_bytes(self, default: int = TORCHSERVE.max_request_size) -> int:
        return self.integer("max_request_size", default)

    @property
    def job_queue_size(self) -> int:
        return self.integer("job_queue_size", TORCHSERVE.job_queue_size)

    @property
    def auth_enabled(self) -> bool:
        """Token authorization, on unless the config turns it off (TorchServe 0.12's default)."""
        return str(self.properties.get("disable_token_authorization", "false")).strip().lower() != "true"


def _models(properties: Mapping[str, str]) -> tuple[tuple[ModelEntry, ...], tuple[str, ...]]:
    key = ServedConfig(properties).models_key
    try:
        parsed = json.loads(properties.get(key) or "{}")
    except ValueError as err:
        return (), (f"{key} is not valid JSON ({err})",)
    if key == SNAPSHOT_KEY and isinstance(parsed, dict):
        parsed = parsed.get(MODELS_KEY, {})
    if not isinstance(parsed, dict):
        return (), (f"{key} must be a JSON object of model name -> {{version -> settings}}, got {type(parsed).__name__}",)
    defaults = _entry_defaults(properties)
    entries, problems = [], []
    for name, versions in parsed.items():
        if not isinstance(versions, dict) or not versions or not all(isinstance(v, dict) for v in versions.values()):
            problems.append(f"{key} entry {name!r} must map a version to its settings, got {versions!r}")
            continue
        version, written = _default_version(versions)
        try:
            entries.append(_entry(name, version, written, defaults))
        except (TypeError, ValueError) as err:
            problems.append(f"{key} entry {name!r}: {err}")
    return tuple(entries), tuple(problems)


def _default_version(versions: Mapping[str, Mapping]) -> tuple[str, Mapping]:
    """The version TorchServe serves by default: the one marked `defaultVersion`, else the first."""
    return next(((v, e) for v, e in versions.items() if e.get("defaultVersion")), next(iter(versions.items())))


def _integer(properties: Mapping[str, str], key: str, default: int) -> int:
    """A whole-number setting, its default where it is missing, empty or not a number (as TorchServe's getters)."""
    value = str(properties.get(key, "")).strip()
    return int(value) if value.lstrip("-").isdigit() else default


def _entry_defaults(properties: Mapping[str, str]) -> dict[str, int]:
    return {"minWorkers": _integer(properties, "default_workers_per_model", TORCHSERVE.workers), "batchSize": TORCHSERVE.batch_size,
            "maxBatchDelay": TORCHSERVE.max_batch_delay_ms,
            "responseTimeout": _integer(properties, "default_response_timeout", TORCHSERVE.response_timeout_s),
            "startupTimeout": _integer(properties, "default_startup_timeout", TORCHSERVE.startup_timeout_s)}


def _entry(name: str, version: str, written: Mapping[str, Any], defaults: Mapping[str, int]) -> ModelEntry:
    number = {key: _whole(key, written.get(key, default)) for key, default in defaults.items()}
    return ModelEntry(name, str(version), str(written.get("marName") or f"{name}.mar"), number["minWorkers"], number["batchSize"],
                      number["maxBatchDelay"], number["responseTimeout"], number["startupTimeout"], dict(written))


def _whole(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    return int(value)
