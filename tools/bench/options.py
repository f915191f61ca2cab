"""What one benchmark run measures: a validated settings object, with QUICK and FULL presets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SYSTEMS = ("decentralized", "torchserve_default", "torchserve_tuned", "ours", "flask_gunicorn", "litserve", "ceiling")
CENTRAL_FIGURE_SYSTEMS = ("torchserve_default", "ours")
DEFAULT_IMAGES = ("skimage:chelsea", "skimage:coffee", "skimage:astronaut")
BACKENDS = ("aoti", "export", "torchscript", "eager")


@dataclass(frozen=True)
class Preset:
    """Sizes of a run; QUICK fits in about ten minutes on a 2-core machine."""

    model: str
    jobs: int  # measured requests per HTTP system
    concurrency: int  # closed-loop clients
    decentralized_jobs: int  # one process each: expensive, so fewer (the rate is what counts)
    ceiling_seconds: float  # time spent per batch size in the in-process ceiling


FULL = Preset(model="resnet152", jobs=160, concurrency=16, decentralized_jobs=12, ceiling_seconds=8.0)
QUICK = Preset(model="resnet18", jobs=96, concurrency=16, decentralized_jobs=8, ceiling_seconds=3.0)


@dataclass(frozen=True)
class BenchOptions:
    model: str = FULL.model
    jobs: int = FULL.jobs
    concurrency: int = FULL.concurrency
    decentralized_jobs: int = FULL.decentralized_jobs
    ceiling_seconds: float = FULL.ceiling_seconds
    images: tuple[str, ...] = DEFAULT_IMAGES
    image_size: tuple[int, int] = (640, 480)  # a typical phone-upload size after a client-side resize
    systems: tuple[str, ...] = SYSTEMS
    backend: str = "aoti"  # our archive's backend
    max_batch: int = 8
    batch: int = 8  # batch size for ours and hand-tuned stock
    tuned_max_batch_delay_ms: int = 100
    ours_workers: int | None = None  # None: what `tsvk config` plans (the archive's suggestion)
    vcpus: int | None = None  # None: detected
    warmup: int | None = None  # None: 2 rounds of min(concurrency, 2 x batch)
    output_dir: Path = Path("benchmarks/results")
    cache_dir: Path = Path(".tsvk/bench")
    tag: str = ""  # results/<timestamp>-<tag>.json and latest-<tag>.json
    quick: bool = False
    ready_timeout_s: float = 1200
    command: str = ""  # the command line that produced the run, for the report

    def __post_init__(self):
        problems = validation_problems(self)
        if problems:
            from ..errors import UsageError

            raise UsageError("; ".join(problems))

    @property
    def warmup_requests(self) -> int:
        return self.warmup if self.warmup is not None else 2 * min(self.concurrency, 2 * self.batch)


def validation_problems(options: BenchOptions) -> list[str]:
    problems = []
    unknown = [s for s in options.systems if s not in SYSTEMS]
    if unknown:
        problems.append(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    if not options.systems:
        problems.append(f"SYSTEMS must name at least one of {', '.join(SYSTEMS)}")
    for name in ("jobs", "concurrency", "decentralized_jobs", "max_batch", "batch"):
        if getattr(options, name) < 1:
            problems.append(f"{name.upper()} must be >= 1, got {getattr(options, name)}")
    if options.batch > options.max_batch:
        problems.append(f"BATCH ({options.batch}) must not exceed MAX_BATCH ({options.max_batch})")
    if options.backend not in BACKENDS:
        problems.append(f"backend must be one of {', '.join(BACKENDS)}, got {options.backend!r}")
    if options.vcpus is not None and options.vcpus < 1:
        problems.append(f"VCPUS must be >= 1, got {options.vcpus}")
    if not options.images:
        problems.append("IMAGE must name at least one photo (skimage:chelsea or a file)")
    if options.tag and not options.tag.replace("-", "").replace("_", "").isalnum():
        problems.append(f"tag must be letters, digits, - or _, got {options.tag!r}")
    return problems


def with_preset(preset: Preset, **overrides) -> BenchOptions:
    """The preset's sizes, then every override that is not None."""
    base = dict(model=preset.model, jobs=preset.jobs, concurrency=preset.concurrency,
                decentralized_jobs=preset.decentralized_jobs, ceiling_seconds=preset.ceiling_seconds)
    base.update({k: v for k, v in overrides.items() if v is not None})
    return BenchOptions(**base)


def resolved_vcpus(options: BenchOptions) -> int:
    from tsvk.cpus import detect_vcpus

    return options.vcpus or detect_vcpus()
