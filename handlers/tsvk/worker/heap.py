"""Handing a worker's freed heap back to the system, so its resident memory follows what it holds.

Batches of varying size and shape allocate and free hundreds of MiB of tensors and pixels. glibc
keeps freed chunks mapped (its trim threshold grows with the largest block freed), so a worker's RSS
sits well above its live heap and creeps up over hours as the free space fragments. `malloc_trim(0)`
returns every free page, from the top of each arena and inside it. It costs a few milliseconds with a
model in the heap, and the next batch pays again to map back the memory it reuses (a page fault per
page: 5% of a ResNet-50 fp32 batch), so a worker calls it at most once per interval, and at most once
per `HEAP_TRIM_BATCHES` batches' time, after a batch has been answered.
Elsewhere than glibc (musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time
from typing import Callable

from ..common.defaults import HEAP_TRIM_BATCHES

log = logging.getLogger(__name__)


def glibc_malloc_trim() -> Callable[[], None] | None:
    """glibc's malloc_trim(0) as a Python callable, or None where the C library has none."""
    try:
        function = ctypes.CDLL(None).malloc_trim  # the process's own symbols: no library search, no subprocess
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: function(0)


def freeze_startup_objects() -> None:
    """Put every object alive once the model is loaded (torch's modules, the model, the settings) out of
    the garbage collector's reach. They live as long as the worker. Left in, each full collection walks
    them all (~160 ms with a ResNet loaded: a pause inside some batch), and a full collection runs only
    once the objects new since the last one reach a quarter of them, so the reference cycles only it can
    free pile up between runs. The frozen objects are not counted: `gc.get_freeze_count()` walks all of
    them (half a million after torch's imports: 35 ms of every worker's start,
    benchmarks/results/20261128T1848Z-worker-load-parts.md)."""
    gc.collect()
    gc.freeze()


class HeapTrimmer:
    """Calls `trim` after a batch when at least `interval_ms`, and at least `batches` times that batch's
    duration, have passed since the last call; an interval of 0 turns it off."""

    def __init__(self, interval_ms: int, trim: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, batches: int = HEAP_TRIM_BATCHES):
        self.interval_s = interval_ms / 1e3
        self.batches = batches
        self.trim = trim if trim is not None or interval_ms == 0 else glibc_malloc_trim()
        self.clock = clock
        self.last = clock()
        self.trims = 0
        if interval_ms and self.trim is None:
            log.info("no malloc_trim in this C library: freed heap stays with the worker")

    def after_batch(self, batch_s: float = 0.0) -> bool:
        """Trim if the interval, and `batches` x `batch_s` (the batch just answered), have passed since the last
        trim; True when it did."""
        if self.trim is None or self.interval_s <= 0:
            return False
        now = self.clock()
        if now - self.last < max(self.interval_s, self.batches * batch_s):
            return False
        self.trim()
        self.last = self.clock()
        self.trims += 1
        return True
