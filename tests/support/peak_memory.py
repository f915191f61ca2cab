"""The most resident memory this process gained during a block, torch's allocations included.

tracemalloc sees only Python's allocator; torch allocates tensors with its own. Linux keeps the
process's resident high-water mark (VmHWM in /proc/self/status) and resets it to the current RSS when
"5" is written to /proc/self/clear_refs (proc(5)), so the growth of that mark is the block's peak.
The heap is trimmed first (glibc's malloc_trim, as a worker does after a batch): memory freed earlier but
still mapped would otherwise be reused unseen, and the figure would depend on what ran before.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tsvk.worker.heap import glibc_malloc_trim

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
MIB = 1 << 20


def _status_kib(field: str) -> int:
    line = next(line for line in STATUS.read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1])


def available() -> bool:
    try:
        CLEAR_REFS.write_text("5")
        return _status_kib("VmHWM") > 0
    except OSError:
        return False


@contextmanager
def peak_growth() -> Iterator[dict]:
    """Yields a dict whose "mib" is, after the block, its peak resident growth in MiB."""
    result = {"mib": 0.0}
    gc.collect()
    trim = glibc_malloc_trim()
    if trim is not None:
        trim()
    CLEAR_REFS.write_text("5")
    start = _status_kib("VmRSS")
    yield result
    result["mib"] = (_status_kib("VmHWM") - start) * 1024 / MIB
