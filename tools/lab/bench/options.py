"""What one benchmark run measures: a validated settings object, with QUICK and FULL presets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsvk.common import ARTIFACT_FORMATS as BACKENDS, DEVICES, features

from ... import defaults
from ...archive.backends import get_backend
from ...cpus import detect_vcpus
from ...errors import UsageError
from ...images import SKIMAGE_PHOTOS
from ...archive.task_builds import task_build

SYSTEMS = ("decentralized", "torchserve_default", "torchserve_tuned", "ours", "ours_tuned", "ours_fast", "ours_oip_rest",
           "ours_oip_grpc", "flask_gunicorn", "litserve", "ceiling", "ceiling_fast", "torchserve_best", "triton", "litserve_fast",
           "ceiling_pipeline_fast", "ceiling_pipeline", "batch", "batch_fast", "batch_ray", "batch_ray_fast", "ours_kserve",
           "ours_kserve_fast", "ours_kserve_oip_rest", "ours_kserve_oip_grpc", "torchserve_draft", "litserve_draft")
# The fastest verified CPU artifact (OpenVINO int8 by default), and the peers serving that same artifact: CPU runs only
FAST_SYSTEMS = ("ours_fast", "ceiling_fast", "triton", "litserve_fast", "ceiling_pipeline_fast", "batch_fast", "batch_ray_fast",
                "ours_kserve_fast", "litserve_draft")
# The strongest alternatives, each at its best; the draft rows are the same peers with the decoding their users write
# by hand for phone photos (peers.py), run by default with photos as sent only, where that decoding matters.
PEER_SYSTEMS = ("torchserve_best", "triton", "litserve_fast", "torchserve_draft", "litserve_draft")
AS_SENT_SYSTEMS = ("torchserve_draft", "litserve_draft")
CENTRAL_FIGURE_SYSTEMS = ("torchserve_default", "ours")
TUNED_VS_GENERATED_SYSTEMS = ("ours", "ours_tuned")  # what `tsvk tune` wrote against the rule's config, same archive
# Detection and segmentation: stock TorchServe with its own object_detector / image_segmenter handlers, ours, the
# ceilings (the compiled model alone, and the fastest CPU artifact's whole pipeline: decode to answer, in-process).
TASK_SYSTEMS = {
    "detect": ("torchserve_default", "torchserve_tuned", "ours", "ours_fast", "ceiling", "ceiling_fast", "ceiling_pipeline_fast"),
    "segment": ("torchserve_default", "torchserve_tuned", "ours", "ours_fast", "ceiling", "ceiling_fast", "ceiling_pipeline_fast"),
}
ROUNDS = 3
ROUND_SECONDS = 20.0  # long enough by time, so the requests per round follow the model's speed
# Unmeasured full load before each time-bounded round: TorchServe's JVM compiles its request path during the first
# tens of seconds (ResNet-50 int8, 2 vCPUs: its frontend's CPU per image halved between a 20 s and a 90 s round), and
# every server's first minutes of allocations settle, so a round measures the steady service a user runs for hours.
WARMUP_SECONDS = 10.0
DEFAULT_IMAGES = tuple(f"skimage:{name}" for name in SKIMAGE_PHOTOS)
# What the systems are sent: `default`, the photos of --image at a typical upload size after a client-side resize
# (640x480); `as-sent`, photos as phones and cameras send them (sent_photos.py: 12-48 MP JPEGs stored sideways
# with an EXIF orientation, a 12 MP HEIC stored so too, a 4K PNG, a 12 MP WebP), each sideways one also asked upright
# and as stored; `as-sent-no-heic`, the same without the HEIC: the photos every peer's decoder (Pillow) opens, so no
# peer fails a batch for a photo it cannot read.
DEFAULT_PHOTOS = "default"
AS_SENT = "as-sent"
AS_SENT_NO_HEIC = "as-sent-no-heic"
AS_SENT_SETS = (AS_SENT, AS_SENT_NO_HEIC)  # the photo sets of phone-size photos, with and without the HEIC
PHOTO_SETS = (DEFAULT_PHOTOS, *AS_SENT_SETS)


@dataclass(frozen=True)
class Preset:
    """Sizes of a run, and about how long it takes on a 2-core machine once its archives are built."""

    model: str
    jobs: int  # measured requests per HTTP system
    concurrency: int  # closed-loop clients
    decentralized_jobs: int  # one process each: expensive, so fewer (the rate is what counts)
    ceiling_seconds: float  # time spent per batch size in the in-process ceiling
    minutes: int = 0  # about how long the run takes on 2 cores (0: not stated)
    rounds: int = ROUNDS
    round_seconds: float = ROUND_SECONDS
    warmup_seconds: float | None = None  # None: WARMUP_SECONDS before time-bounded rounds
    max_variants: int | None = None  # a hand-tuned system tries at most this many of its variants (None: all)


FULL = Preset(model="resnet152", jobs=160, concurrency=16, decentralized_jobs=12, ceiling_seconds=8.0, minutes=60)
# A smoke run: every row of the full table starts, answers and is stopped once (one round of 3 s after 1 s of
# warm-up load, each hand-tuned system at its first variant only). It proves each part works; its figures have no
# spread and a cold JIT behind them, so they are not for comparison.
QUICK = Preset(
    model="resnet18",
    jobs=96,
    concurrency=16,
    decentralized_jobs=4,
    ceiling_seconds=1.0,
    minutes=10,
    rounds=1,
    round_seconds=3.0,
    warmup_seconds=1.0,
    max_variants=1,
)
# A GPU answers hundreds of images a second: more requests and clients, or the run measures its start.
GPU = Preset(model="resnet152", jobs=1600, concurrency=64, decentralized_jobs=32, ceiling_seconds=8.0)


@dataclass(frozen=True)
class BenchOptions:
    model: str = FULL.model
    jobs: int = FULL.jobs
    concurrency: int = FULL.concurrency
    decentralized_jobs: int = FULL.decentralized_jobs
    ceiling_seconds: float = FULL.ceiling_seconds
    rounds: int = ROUNDS  # each system measured this many times, in alternating rounds (A B C, A B C, ...)
    round_seconds: float = ROUND_SECONDS  # each round's load lasts this long (0: `jobs` requests instead)
    max_variants: int | None = None  # a hand-tuned system tries at most this many of its variants (None: all)
    images: tuple[str, ...] = DEFAULT_IMAGES
    photos: str = DEFAULT_PHOTOS  # one of PHOTO_SETS; `as-sent` replaces `images`
    image_size: tuple[int, int] = (640, 480)  # a typical phone-upload size after a client-side resize
    systems: tuple[str, ...] | None = None  # None: every system that runs on `device`
    backend: str = defaults.BACKEND  # our archive's backend
    device: str = defaults.DEVICE  # where every system runs its model: cpu, or cuda (the GPU mode)
    precision: str = defaults.PRECISION  # our archive's precision (fp16 in the GPU mode)
    fast_backend: str = defaults.FAST_BACKEND  # ours_fast / ceiling_fast: the fastest verified CPU artifact
    fast_precision: str = defaults.FAST_PRECISION
    backend_note: str = ""  # why this backend, when the run chose it (the GPU mode)
    max_batch: int = defaults.MAX_BATCH
    batch: int = defaults.BATCH  # batch size for ours and hand-tuned stock
    tuned_max_batch_delay_ms: int = 100
    ours_workers: int | None = None  # None: what `tsvk config` plans (tools/config/worker_plan.py)
    tuned_config: Path = Path(defaults.TUNE_OUTPUT)  # ours_tuned serves the numbers `tsvk tune` wrote here, when it has the model
    vcpus: int | None = None  # None: detected
    warmup: int | None = None  # None: 2 rounds of min(concurrency, 2 x batch)
    warmup_seconds: float | None = None  # None: WARMUP_SECONDS before time-bounded rounds, none before counted ones
    output_dir: Path = Path("benchmarks/results")
    cache_dir: Path = Path(defaults.BENCH_CACHE_DIR)
    tag: str = ""  # results/<timestamp>-<tag>.json and latest-<tag>.json
    quick: bool = False
    ready_timeout_s: float = 1200
    command: str = ""  # the command line that produced the run, for the report

    @property
    def task(self) -> str:
        """The model's task, from torchvision's own lists (classify for anything it does not list)."""
        from ...archive.models import torchvision_builders  # torch: the options load without it

        return torchvision_builders().get(self.model, "classify")

    def __post_init__(self):
        if self.systems is None:  # frozen: these are the only fields filled in after construction
            object.__setattr__(self, "systems", default_systems(self.device, self.task, self.photos))
        if self.backend == defaults.BACKEND:
            object.__setattr__(self, "backend", task_build(self.task).default_backend)  # torch.export cannot capture a detector
        problems = validation_problems(self)
        if problems:
            raise UsageError("; ".join(problems))

    @property
    def as_sent(self) -> bool:
        """Photos as phones send them: decode-heavy, sideways ones checked for how they are answered."""
        return self.photos in AS_SENT_SETS

    @property
    def warmup_requests(self) -> int:
        return self.warmup if self.warmup is not None else 2 * min(self.concurrency, 2 * self.batch)

    @property
    def warmup_load_seconds(self) -> float:
        """Seconds of unmeasured full load after the warm-up requests."""
        if self.warmup_seconds is not None:
            return self.warmup_seconds
        return WARMUP_SECONDS if self.round_seconds else 0.0


def default_systems(device: str, task: str = "classify", photos: str = DEFAULT_PHOTOS) -> tuple[str, ...]:
    """Every system that serves the task; in the GPU mode all but the rows that measure a CPU-only artifact; the
    hand-written draft rows with photos as sent only (on photos already small, their decoding is the plain one)."""
    systems = TASK_SYSTEMS.get(task, SYSTEMS)
    if photos not in AS_SENT_SETS:
        systems = tuple(s for s in systems if s not in AS_SENT_SYSTEMS)
    return systems if device != "cuda" else tuple(s for s in systems if s not in FAST_SYSTEMS)


def validation_problems(options: BenchOptions) -> list[str]:
    problems = []
    unknown = [s for s in options.systems if s not in SYSTEMS]
    if unknown:
        problems.append(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    if not options.systems:
        problems.append(f"systems must name at least one of {', '.join(SYSTEMS)}")
    if options.round_seconds < 0:
        problems.append(f"round_seconds must be >= 0 (0: a fixed number of jobs per round), got {options.round_seconds}")
    if options.warmup_seconds is not None and options.warmup_seconds < 0:
        problems.append(f"warmup_seconds must be >= 0 (0: no unmeasured load beyond the warm-up requests), got {options.warmup_seconds}")
    for name in ("jobs", "concurrency", "decentralized_jobs", "max_batch", "batch", "rounds", "max_variants"):
        if getattr(options, name) is not None and getattr(options, name) < 1:
            problems.append(f"{name} must be >= 1, got {getattr(options, name)}")
    if options.task in TASK_SYSTEMS:
        allowed = TASK_SYSTEMS[options.task]
        others = [s for s in options.systems if s not in allowed]
        if others:
            problems.append(f"{', '.join(others)} cannot serve the {options.task} model {options.model}; choose from {', '.join(allowed)}")
    if options.batch > options.max_batch:
        problems.append(f"batch ({options.batch}) must not exceed max_batch ({options.max_batch})")
    if options.backend not in BACKENDS:
        problems.append(f"backend must be one of {', '.join(BACKENDS)}, got {options.backend!r}")
    elif options.device not in DEVICES:
        problems.append(f"device must be one of {', '.join(DEVICES)}, got {options.device!r}")
    else:
        problems += _target_problems(options.backend, options.device, options.precision)
    problems += _fast_problems(options)
    if options.vcpus is not None and options.vcpus < 1:
        problems.append(f"vcpus must be >= 1, got {options.vcpus}")
    if not options.images:
        problems.append(f"images must name at least one photo ({defaults.IMAGE} or a file)")
    problems += _photo_problems(options)
    if options.tag and not options.tag.replace("-", "").replace("_", "").isalnum():
        problems.append(f"tag must be letters, digits, - or _, got {options.tag!r}")
    return problems


def _photo_problems(options: BenchOptions) -> list[str]:
    """The photo set is one of PHOTO_SETS, and the as-sent set is not mixed with --image's photos."""
    if options.photos not in PHOTO_SETS:
        return [f"photos must be one of {', '.join(PHOTO_SETS)}, got {options.photos!r}"]
    if options.photos != DEFAULT_PHOTOS and options.images != DEFAULT_IMAGES:
        return [f"photos {options.photos} is its own set of photos; leave out images (--image) or use photos default"]
    return []


def _target_problems(backend: str, device: str, precision: str) -> list[str]:
    """The backend/device/precision combinations our archive can be built for (no device is probed here)."""
    supported = get_backend(backend).precisions
    if device not in supported:
        return [f"backend {backend} does not run on device {device}; it runs on {', '.join(supported)}"]
    if precision not in supported[device]:
        return [f"backend {backend} on {device} supports precision {', '.join(supported[device])}, got {precision!r}"]
    return []


def _fast_problems(options: BenchOptions) -> list[str]:
    """The fast rows run on the CPU only, with an artifact that can be built for the CPU."""
    chosen = [s for s in options.systems if s in FAST_SYSTEMS]
    if chosen and options.device == "cuda":
        return [f"{', '.join(chosen)} measure the fastest CPU artifact and cannot run in the GPU mode"]
    if options.fast_backend not in BACKENDS:
        return [f"fast backend must be one of {', '.join(BACKENDS)}, got {options.fast_backend!r}"]
    return _target_problems(options.fast_backend, "cpu", options.fast_precision)


def gpu_backend() -> tuple[str, str]:
    """The GPU mode's backend for our archive, and why: TensorRT where it imports, else AOTInductor on CUDA."""
    if features.has_torch_tensorrt():
        return "tensorrt", "torch_tensorrt imports"
    return "aoti", f"torch_tensorrt is not usable here ({features.unavailable_reason('torch_tensorrt')}), so AOTInductor on CUDA"


def require_device(options: BenchOptions) -> None:
    """Fail before building anything when the run asks for a GPU this machine does not have."""
    if options.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            f"the GPU mode (--gpu) needs a CUDA GPU, and torch {torch.__version__} sees none here "
            "(torch.cuda.is_available() is False); run without --gpu for the CPU table"
        )


def with_preset(preset: Preset, **overrides) -> BenchOptions:
    """The preset's sizes, then every override that is not None."""
    base = dict(
        model=preset.model,
        jobs=preset.jobs,
        concurrency=preset.concurrency,
        decentralized_jobs=preset.decentralized_jobs,
        ceiling_seconds=preset.ceiling_seconds,
        rounds=preset.rounds,
        round_seconds=preset.round_seconds,
        warmup_seconds=preset.warmup_seconds,
        max_variants=preset.max_variants,
    )
    base.update({k: v for k, v in overrides.items() if v is not None})
    return BenchOptions(**base)


def resolved_vcpus(options: BenchOptions) -> int:
    return options.vcpus or detect_vcpus()
