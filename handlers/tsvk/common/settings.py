"""The settings schema: the one contract between build time (tools/) and run time (handlers/).

`tools` writes it into the archive's model-config.yaml under the `tsvk` key; the handler reads it
back at load. Every field is validated in one pass and all problems are reported together, each
naming the key and what is allowed, so a bad archive fails at load with a message, not a KeyError.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

from .defaults import (
    BATCH,
    CPU_FORWARD_PIXELS,
    CVCUDA_CACHE_MB,
    DEVICE,
    HEAP_TRIM_INTERVAL_MS,
    LABEL_MAP,
    LABEL_MAP_MAX_SIDE,
    MASK_THRESHOLD,
    MAX_BATCH,
    MAX_BATCH_DELAY_MS,
    MAX_BATCH_PIXELS,
    MAX_DETECTIONS,
    MAX_JPEG_PIXELS,
    PILLOW_MAX_PIXELS,
    MAX_JPEG_SCAN_BLOCKS,
    MAX_JPEG_SCANS,
    MAX_MASK_PIXELS,
    MAX_PIXELS,
    PRECISION,
    RESPONSE_TIMEOUT_S,
    SCORE_FLOOR,
    SCORE_THRESHOLD,
    TASK,
    TOPK,
)
from .task_kinds import TASKS as TASK_KINDS, task_kind

SCHEMA_VERSION = 1
SETTINGS_KEY = "tsvk"

ARTIFACT_FORMATS = ("aoti", "export", "torchscript", "tensorrt", "eager", "openvino")
DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")  # int8: weights and activations; the input stays fp32
PREPROCESS_BACKENDS = ("auto", "cvcuda", "cuda", "cpu")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
MODEL_SOURCES = ("torchvision", "file")
TASKS = tuple(TASK_KINDS)  # what the model answers: top-k classes, boxes (and masks), a label map


class SettingsError(ValueError):
    """Raised with every problem found in a settings mapping, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid tsvk settings:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class ModelSource:
    """Where the eager model's code comes from (needed by the `eager` format and by verification)."""

    kind: str = "torchvision"  # torchvision: `builder` names a torchvision.models builder
    builder: str = ""  # file: `file` is a .py packed in the archive, `factory` a class or function
    file: str = ""
    factory: str = ""


@dataclass(frozen=True)
class ArtifactSettings:
    """The compiled model packed in the archive."""

    file: str
    format: str
    device: str = DEVICE
    precision: str = PRECISION
    max_batch: int = MAX_BATCH
    source: ModelSource = field(default_factory=ModelSource)
    # device cuda: the GPU it was built on, by name and compute capability ("9.0"); '' where unknown or cpu
    gpu: str = ""
    compute_capability: str = ""


@dataclass(frozen=True)
class PreprocessSettings:
    """How a decoded image becomes the model's input tensor; values come from the weights' metadata.

    classify: shorter side -> `resize`, center `crop`. detect and segment keep the whole photo (`crop`
    0): its shorter side -> `resize` unless the longer one would then exceed `max_size`, or exactly
    `fixed_size` (width, height) for detectors trained on one size (SSD)."""

    resize: int = 256
    crop: int = 224
    max_size: int = 0  # 0: no limit on the longer side
    fixed_size: tuple[int, ...] = ()  # (width, height), or () to keep the aspect ratio
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    interpolation: str = "bilinear"
    antialias: bool = True
    backend: str = "auto"
    strict: bool = False
    max_pixels: int = MAX_PIXELS  # decoded: a JPEG at its reduced DCT scale, any other image whole
    max_jpeg_pixels: int = MAX_JPEG_PIXELS  # a JPEG decoded at a reduced DCT scale declares at most this many in its header
    max_batch_pixels: int = MAX_BATCH_PIXELS  # larger batches are decoded in chunks (every task and backend)
    cvcuda_cache_mb: int = CVCUDA_CACHE_MB  # cvcuda backend: the most GPU memory CV-CUDA's object cache keeps
    max_jpeg_scans: int = MAX_JPEG_SCANS  # a JPEG with more scans is refused before decoding (every backend)
    max_jpeg_scan_blocks: int = MAX_JPEG_SCAN_BLOCKS  # 8x8 blocks its scans visit in all (progressive: blocks x scans)
    # CPU: decode a JPEG over 4x `resize` at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling), keeping
    # at least 2x `resize` for the antialiased resize: 3x faster on 12 MP photos (docs/handler.md).
    jpeg_dct_scaling: bool = True


@dataclass(frozen=True)
class RuntimeSettings:
    """Per-worker behaviour. intra_op_threads=0 means: take it from the TorchServe config at load."""

    topk: int = TOPK
    intra_op_threads: int = 0
    inter_op_threads: int = 1
    heap_trim_interval_ms: int = HEAP_TRIM_INTERVAL_MS


@dataclass(frozen=True)
class DetectSettings:
    """What a detector's answer holds; a request may ask for another threshold or count (options).

    `score_floor` is the lowest score the model itself keeps (set at load): a request may not ask
    for less, since boxes below it were never computed."""

    score_threshold: float = SCORE_THRESHOLD
    max_detections: int = MAX_DETECTIONS
    score_floor: float = SCORE_FLOOR
    mask_threshold: float = MASK_THRESHOLD
    masks: bool = False  # the model outputs instance masks (Mask R-CNN): answers carry them as COCO RLE
    max_mask_pixels: int = MAX_MASK_PIXELS  # one image's masks paste at most this many pixels, else at a reduced resolution
    cpu_forward_pixels: int = CPU_FORWARD_PIXELS  # on a CPU, one forward takes at most this many resized pixels (a larger image alone)


@dataclass(frozen=True)
class SegmentSettings:
    """What a segmenter's answer holds: per-class areas always, the label map PNG unless turned off."""

    label_map: bool = LABEL_MAP
    label_map_max_side: int = LABEL_MAP_MAX_SIDE  # 0: the photo's own size


@dataclass(frozen=True)
class ServingDefaults:
    """What the archive suggests to `tsvk config`. Deliberately NOT TorchServe's top-level keys:
    values there override config.properties, and the generated config must decide."""

    batch_size: int = BATCH
    max_batch_delay_ms: int = MAX_BATCH_DELAY_MS
    workers: int | None = None  # None: `tsvk config` plans them (single-threaded CPU workers as memory allows)
    response_timeout_s: int = RESPONSE_TIMEOUT_S


@dataclass(frozen=True)
class HandlerSettings:
    """Everything the handler needs, as packed by `tsvk archive`."""

    model_name: str
    artifact: ArtifactSettings
    task: str = TASK
    preprocess: PreprocessSettings = field(default_factory=PreprocessSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    detect: DetectSettings = field(default_factory=DetectSettings)
    segment: SegmentSettings = field(default_factory=SegmentSettings)
    serving: ServingDefaults = field(default_factory=ServingDefaults)
    labels_file: str = "index_to_name.json"
    schema_version: int = SCHEMA_VERSION
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so yaml.safe_dump can write it."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_model_yaml(cls, model_yaml: Mapping[str, Any] | None) -> "HandlerSettings":
        """Read the `tsvk` section of a model-config.yaml mapping (TorchServe's model_yaml_config)."""
        if not model_yaml or SETTINGS_KEY not in model_yaml:
            raise SettingsError([f"model-config.yaml has no '{SETTINGS_KEY}' section; build the archive with `tsvk archive`"])
        return cls.from_dict(model_yaml[SETTINGS_KEY])

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "HandlerSettings":
        problems: list[str] = []
        reader = _Reader(raw, SETTINGS_KEY, problems)
        settings = _build_handler_settings(reader, problems)
        reader.report_unknown_keys()
        if problems:
            raise SettingsError(problems)
        return settings


def _build_handler_settings(reader: "_Reader", problems: list[str]) -> HandlerSettings | None:
    version = reader.integer("schema_version", SCHEMA_VERSION, minimum=1)
    if version is not None and version > SCHEMA_VERSION:
        problems.append(f"tsvk.schema_version {version} is newer than this handler understands ({SCHEMA_VERSION})")
    task = reader.choice("task", TASKS, TASK)
    preprocess = _build_preprocess(reader.section("preprocess"))
    if task_kind(task).crops and preprocess.crop < 1:
        problems.append(f"{SETTINGS_KEY}.preprocess.crop must be an integer >= 1 for task {task}, got {preprocess.crop}")
    detect = _build_detect(reader.section("detect"))
    if detect.score_floor > detect.score_threshold:
        problems.append(
            f"{SETTINGS_KEY}.detect.score_floor ({detect.score_floor}) must not exceed detect.score_threshold ({detect.score_threshold})"
        )
    return HandlerSettings(
        model_name=reader.text("model_name"),
        artifact=_build_artifact(reader.section("artifact", required=True)),
        task=task,
        preprocess=preprocess,
        runtime=_build_runtime(reader.section("runtime")),
        detect=detect,
        segment=_build_segment(reader.section("segment")),
        serving=_build_serving(reader.section("serving")),
        labels_file=reader.text("labels_file", "index_to_name.json"),
        schema_version=version or SCHEMA_VERSION,
        provenance=reader.mapping("provenance"),
    )


def _build_artifact(reader: "_Reader") -> ArtifactSettings:
    source = reader.section("source")
    kind = source.choice("kind", MODEL_SOURCES, "torchvision")
    return ArtifactSettings(
        file=reader.text("file"),
        format=reader.choice("format", ARTIFACT_FORMATS),
        device=reader.choice("device", DEVICES, DEVICE),
        precision=reader.choice("precision", PRECISIONS, PRECISION),
        max_batch=reader.integer("max_batch", MAX_BATCH, minimum=1),
        gpu=reader.text("gpu", ""),
        compute_capability=reader.text("compute_capability", ""),
        source=ModelSource(
            kind=kind,
            builder=source.text("builder", "" if kind == "file" else None),
            file=source.text("file", "" if kind == "torchvision" else None),
            factory=source.text("factory", "" if kind == "torchvision" else None),
        ),
    )


def _build_preprocess(reader: "_Reader") -> PreprocessSettings:
    defaults = PreprocessSettings()
    return PreprocessSettings(
        resize=reader.integer("resize", defaults.resize, minimum=1),
        crop=reader.integer("crop", defaults.crop, minimum=0),
        max_size=reader.integer("max_size", defaults.max_size, minimum=0),
        fixed_size=reader.size("fixed_size", defaults.fixed_size),
        mean=reader.triple("mean", defaults.mean),
        std=reader.triple("std", defaults.std, positive=True),
        interpolation=reader.choice("interpolation", INTERPOLATIONS, defaults.interpolation),
        antialias=reader.boolean("antialias", defaults.antialias),
        backend=reader.choice("backend", PREPROCESS_BACKENDS, defaults.backend),
        strict=reader.boolean("strict", defaults.strict),
        max_pixels=reader.integer("max_pixels", defaults.max_pixels, minimum=1),
        max_jpeg_pixels=reader.integer("max_jpeg_pixels", defaults.max_jpeg_pixels, minimum=1, maximum=PILLOW_MAX_PIXELS),
        max_batch_pixels=reader.integer("max_batch_pixels", defaults.max_batch_pixels, minimum=1),
        cvcuda_cache_mb=reader.integer("cvcuda_cache_mb", defaults.cvcuda_cache_mb, minimum=0),
        max_jpeg_scans=reader.integer("max_jpeg_scans", defaults.max_jpeg_scans, minimum=1),
        max_jpeg_scan_blocks=reader.integer("max_jpeg_scan_blocks", defaults.max_jpeg_scan_blocks, minimum=1),
        jpeg_dct_scaling=reader.boolean("jpeg_dct_scaling", defaults.jpeg_dct_scaling),
    )


def _build_detect(reader: "_Reader") -> DetectSettings:
    defaults = DetectSettings()
    return DetectSettings(
        score_threshold=reader.fraction("score_threshold", defaults.score_threshold),
        max_detections=reader.integer("max_detections", defaults.max_detections, minimum=1),
        score_floor=reader.fraction("score_floor", defaults.score_floor),
        mask_threshold=reader.fraction("mask_threshold", defaults.mask_threshold),
        masks=reader.boolean("masks", defaults.masks),
        max_mask_pixels=reader.integer("max_mask_pixels", defaults.max_mask_pixels, minimum=1),
        cpu_forward_pixels=reader.integer("cpu_forward_pixels", defaults.cpu_forward_pixels, minimum=1),
    )


def _build_segment(reader: "_Reader") -> SegmentSettings:
    defaults = SegmentSettings()
    return SegmentSettings(
        label_map=reader.boolean("label_map", defaults.label_map),
        label_map_max_side=reader.integer("label_map_max_side", defaults.label_map_max_side, minimum=0),
    )


def _build_runtime(reader: "_Reader") -> RuntimeSettings:
    defaults = RuntimeSettings()
    return RuntimeSettings(
        topk=reader.integer("topk", defaults.topk, minimum=1),
        intra_op_threads=reader.integer("intra_op_threads", defaults.intra_op_threads, minimum=0),
        inter_op_threads=reader.integer("inter_op_threads", defaults.inter_op_threads, minimum=1),
        heap_trim_interval_ms=reader.integer("heap_trim_interval_ms", defaults.heap_trim_interval_ms, minimum=0),
    )


def _build_serving(reader: "_Reader") -> ServingDefaults:
    defaults = ServingDefaults()
    return ServingDefaults(
        batch_size=reader.integer("batch_size", defaults.batch_size, minimum=1),
        max_batch_delay_ms=reader.integer("max_batch_delay_ms", defaults.max_batch_delay_ms, minimum=0),
        workers=reader.optional_integer("workers", minimum=1),
        response_timeout_s=reader.integer("response_timeout_s", defaults.response_timeout_s, minimum=1),
    )


_REQUIRED = object()


class _Reader:
    """Typed access to one mapping; each failed read appends 'key must be X, got Y' to problems.

    Every key read is remembered, so a key nobody reads (a typo such as `backnd`) is reported
    instead of silently leaving the default in place."""

    def __init__(self, raw: Any, path: str, problems: list[str]):
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            problems.append(f"{path} must be a mapping, got {type(raw).__name__}")
            raw = {}
        self.raw, self.path, self.problems = raw, path, problems
        self.known: set[str] = set()
        self.children: list[_Reader] = []

    def report_unknown_keys(self) -> None:
        """One problem per key of this mapping (and of every section read from it) that no field reads."""
        for key in sorted(set(map(str, self.raw)) - self.known):
            close = difflib.get_close_matches(key, sorted(self.known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.problems.append(f"{self.path}.{key} is not a known setting (known: {', '.join(sorted(self.known))}){hint}")
        for child in self.children:
            child.report_unknown_keys()

    def _get(self, key: str, default: Any) -> Any:
        self.known.add(key)
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if default is None or default is _REQUIRED:
            self.problems.append(f"{self.path}.{key} is required")
            return _REQUIRED
        return default

    def _bad(self, key: str, wanted: str, value: Any) -> None:
        self.problems.append(f"{self.path}.{key} must be {wanted}, got {value!r}")

    def section(self, key: str, required: bool = False) -> "_Reader":
        self.known.add(key)
        if required and key not in self.raw:
            self.problems.append(f"{self.path}.{key} is required")
        child = _Reader(self.raw.get(key), f"{self.path}.{key}", self.problems)
        self.children.append(child)
        return child

    def mapping(self, key: str) -> dict[str, Any]:
        """A free-form mapping (provenance): its own keys are not checked."""
        self.known.add(key)
        value = self.raw.get(key) or {}
        if not isinstance(value, Mapping):
            self._bad(key, "a mapping", value)
            return {}
        return dict(value)

    def text(self, key: str, default: Any = None) -> str:
        value = self._get(key, default)
        if value is _REQUIRED:
            return ""
        if not isinstance(value, str):
            self._bad(key, "a string", value)
            return ""
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: Any = None) -> str:
        value = self._get(key, default)
        if value is _REQUIRED:
            return allowed[0]
        if value not in allowed:
            self._bad(key, "one of " + ", ".join(allowed), value)
            return allowed[0]
        return value

    def integer(self, key: str, default: Any = None, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._get(key, default)
        if value is _REQUIRED:
            return minimum or 0
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum) or \
                (maximum is not None and value > maximum):
            self._bad(key, _integer_range(minimum, maximum), value)
            return default if isinstance(default, int) else (minimum or 0)
        return value

    def optional_integer(self, key: str, minimum: int) -> int | None:
        """An integer >= minimum, or None where the key is absent or null."""
        self.known.add(key)
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._bad(key, f"an integer >= {minimum} or null", value)
            return None
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            self._bad(key, "true or false", value)
            return default
        return value

    def fraction(self, key: str, default: float) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            self._bad(key, "a number from 0 to 1", value)
            return default
        return float(value)

    def size(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        """(width, height) in pixels, or an empty list for none."""
        value = self._get(key, default)
        if isinstance(value, (list, tuple)) and len(value) == 0:
            return ()
        pair = (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
        )
        if not pair:
            self._bad(key, "[width, height] (two positive integers) or []", value)
            return default
        return tuple(value)

    def triple(self, key: str, default: tuple[float, float, float], positive: bool = False) -> tuple[float, float, float]:
        value = self._get(key, default)
        numbers = (
            isinstance(value, (list, tuple))
            and len(value) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        )
        if not numbers or (positive and min(value) <= 0):
            self._bad(key, "three " + ("positive " if positive else "") + "numbers (r, g, b)", value)
            return default
        return tuple(float(v) for v in value)  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _integer_range(minimum: int | None, maximum: int | None) -> str:
    """What an integer setting must be, in the words of its error."""
    if minimum is not None and maximum is not None:
        return f"an integer from {minimum} to {maximum}"
    return f"an integer >= {minimum}" if minimum is not None else "an integer"
