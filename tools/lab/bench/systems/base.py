"""What the harness needs from a system, and the shared context every system runs in.

A *served* system starts, is ready, answers HTTP, and is stopped; the harness drives the load.
A *self-timed* system (one process per job, the in-process ceiling) runs its own work and returns
its measurements. Both run under the same process-tree sampler.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

from ....measure.loadgen import TIME_BOUNDED_JOBS, HttpTarget, run_closed_loop
from ..options import BenchOptions


@dataclass
class Deployment:
    """A started system: where to send requests, how to stop it, and what it is running."""

    target: HttpTarget
    stop: Callable[[], None]
    details: dict = field(default_factory=dict)
    profile: Callable[[], dict] | None = None  # called before and after the measured load


@dataclass
class RunContext:
    """Everything shared by the systems of one run; archives are built the first time one is needed."""

    options: BenchOptions
    vcpus: int
    run_dir: Path
    _pt2_mars: dict = field(default_factory=dict, repr=False)

    @cached_property
    def weights(self) -> Path:
        return _assets().shared_weights(self.options)

    @cached_property
    def photos(self) -> list:
        return _assets().photos(self.options)

    @property
    def largest_photo(self) -> int:
        """Bytes of the largest photo sent, a sideways photo's twins included: a hand-tuned server is set to take it."""
        twins = [path.stat().st_size for photo in self.photos for path in (photo.upright, photo.stored) if path is not None]
        return max([len(photo.data) for photo in self.photos] + twins)

    @cached_property
    def ours_mar(self) -> Path:
        return _assets().ours_archive(self.options, self.weights)

    @cached_property
    def fast_mar(self) -> Path:
        """Our archive built with the fastest verified CPU artifact (`fast_backend` / `fast_precision`)."""
        fast = replace(self.options, backend=self.options.fast_backend, precision=self.options.fast_precision)
        return _assets().ours_archive(fast, self.weights)

    @cached_property
    def stock_mar(self) -> Path:
        return _assets().stock_archive(self.options, self.weights)

    def pt2_mar(self, backend: str, handler: Path | None = None) -> Path:
        """The stock eager archive with TorchServe's `pt2` compile for `backend`, with the built-in image_classifier or
        a user's `handler` file (built once per run, backend and handler)."""
        if (backend, handler) not in self._pt2_mars:
            self._pt2_mars[backend, handler] = _assets().pt2_archive(self.options, self.weights, backend, handler)
        return self._pt2_mars[backend, handler]

    def system_dir(self, name: str) -> Path:
        path = self.run_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _assets():
    """tools/lab/bench/assets.py, which builds weights and archives with torch: imported once a system needs one, so
    that the harness, the report and `tsvk bench --render` work without torch."""
    from .. import assets  # torch: only once a system needs weights, photos or an archive

    return assets


class System:
    """Base class: subclasses set name/label/description and implement `start` or `run`."""

    name = ""
    label = ""
    description = ""
    self_timed = False

    def unavailable(self, ctx: RunContext) -> str:
        """Why this system cannot run here (it is then left out of the run, said once), or ""."""
        return ""

    def prepare(self, ctx: RunContext) -> None:
        """Build what this system needs before it is timed (archives, weights)."""

    def variants(self, ctx: RunContext) -> list[dict]:
        """Configurations to try; the best is reported (one, unless the system is tuned by hand)."""
        return [{}]

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        raise NotImplementedError

    def warm_up(self, deployment: Deployment, images: list[bytes], options: BenchOptions) -> list:
        """Unmeasured requests before the load, at the load's concurrency (at most as many clients as requests): first
        calls, compiles and lazy allocations happen here; then, unless those all failed, `warmup_load_seconds` of the
        full load, so that the measured round finds the server in the state it keeps for hours (a JIT-compiled frontend)."""
        warmup = options.warmup_requests
        warm = run_closed_loop(deployment.target, images, warmup, min(warmup, options.concurrency)) if warmup else []
        seconds = options.warmup_load_seconds
        if seconds and (not warm or any(record.ok for record in warm)):
            warm += run_closed_loop(deployment.target, images, TIME_BOUNDED_JOBS, options.concurrency, until=time.monotonic() + seconds)
        return warm

    def run(self, ctx: RunContext, variant: dict) -> dict:
        """A self-timed system's measurement. Its `load_window`, (start, end) on `time.monotonic()`'s clock (one clock
        for every process of the machine), is the span its rate counts: the CPU per image is read over it. A run that
        gives none has no CPU per image (a start-up counted in would make each image look cheaper or dearer)."""
        raise NotImplementedError
