"""Handing a worker's freed heap back to the system, so its resident memory follows what it holds.

Batches of varying size and shape allocate and free hundreds of MiB of tensors and pixels. glibc
keeps freed chunks mapped (its trim threshold grows with the largest block freed), so a worker's RSS
sits well above its live heap and creeps up over hours as the free space fragments. `malloc_trim(0)`
returns every free page, from the top of each arena and inside it. It costs a few milliseconds with a
model in the heap, and the next batch pays again to map back the memory it reuses (a page fault per
page: 5% of a ResNet-50 fp32 batch), so a worker calls it at most once per interval, and at most once
per `HEAP_TRIM_BATCHES` batches' time, after a batch has been answered.
Between trims, freed memory is kept for the next batch (`reuse_freed_heap`) instead of being handed back at every
free. Elsewhere than glibc (musl, macOS) there are no such calls and nothing is done.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time
from typing import Callable

from ..common.defaults import HEAP_TRIM_BATCHES

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
INT_MAX = 2**31 - 1  # mallopt's value is a C int


def glibc_malloc_trim() -> Callable[[], None] | None:
    """glibc's malloc_trim(0) as a Python callable, or None where the C library has none."""
    try:
        function = ctypes.CDLL(None).malloc_trim  # the process's own symbols: no library search, no subprocess
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: function(0)


def reuse_freed_heap() -> bool:
    """Serve every allocation from the heap and leave freed memory there for the next batch; True where glibc took it.

    glibc maps each allocation past its mmap threshold (128 KiB, rising to 32 MiB as large blocks are freed) on its own
    and unmaps it when it is freed, and hands back the heap's free top at a free past its trim threshold. A photo decoded
    at full size (a 12 MP HEIC or WebP, a 4K PNG: tens of MiB in the decoder and as much in Pillow) then faults every
    page of those buffers in again, photo after photo: 60-170 ms of system CPU per photo on a 2-vCPU AMD EPYC, a fifth
    to two fifths of its decode (page faults and zeroing; benchmarks/results/20261129T2150Z-worker-heap-reuse.md).
    With no mapping of its own and a trim threshold out of reach, the next photo reuses the pages; `HeapTrimmer` still
    hands the free ones back at its interval, so between trims a worker holds what its largest batch needed, as it
    did at that batch's peak."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, INT_MAX))


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
