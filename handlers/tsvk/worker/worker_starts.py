"""Count the workers started for one model, so a restarted worker says so in its log and metrics.

TorchServe restarts a worker that died (SIGKILL, the OOM killer) and answers the dead worker's batch
itself; nothing reaches the handler. Every worker of a model shares the model's unpacked archive
directory, so each one adds itself to a small counter file there when it loads: more starts than
configured workers means workers died and were replaced.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

STARTS_FILE = ".tsvk-worker-starts"


def record_worker_start(model_dir: Path) -> int:
    """This worker's start number for the model (1 for the first), or 0 when it cannot be counted."""
    path = Path(model_dir) / STARTS_FILE
    try:
        with open(path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # workers of one model load in parallel
            handle.seek(0)
            text = handle.read().strip()
            count = (int(text) if text.isdigit() else 0) + 1
            handle.seek(0)
            handle.truncate()
            handle.write(str(count))
            handle.flush()
            os.fsync(handle.fileno())
        return count
    except OSError as err:
        log.warning("cannot count worker starts in %s: %s", path, err)
        return 0
