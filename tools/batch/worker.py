"""A local batch worker process: `python -m tsvk_tools.batch.worker SPEC_JSON`.

It loads the archive (scorer.py), says it is ready, then reads tasks from stdin, one JSON line each
(`{"ids": [...], "sources": [...]}`), and writes one JSON row per input to its protocol pipe, in order. It
ends when stdin closes, and with its parent: the kernel sends it SIGKILL when the process that started it
dies (PR_SET_PDEATHSIG), so a killed run leaves no worker behind. Its stdout is moved to stderr first, so
whatever a library prints cannot mix into the rows.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from .scorer import ArchiveScorer, WorkerSpec

PR_SET_PDEATHSIG = 1  # linux/prctl.h
READY = "ready"


def die_with_parent() -> None:
    """SIGKILL this process when its parent ends (Linux); elsewhere the closed stdin ends it instead."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def protocol_pipe():
    """The real stdout for rows; fd 1 then points at stderr, where the worker's logs go."""
    pipe = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1 << 16)
    os.dup2(2, 1)
    return pipe


def main(argv: list[str]) -> int:
    die_with_parent()
    out = protocol_pipe()
    spec = WorkerSpec(**json.loads(argv[0]))
    scorer = ArchiveScorer(spec)
    out.write(json.dumps({READY: os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        task = json.loads(line)
        for text in scorer.score(task["ids"], task["sources"]):
            out.write(text + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
