"""What a long step is doing, while it does it: its phase, the time it has taken, what it waits for.

Commands wrap each step that can take more than a couple of seconds in `step(...)`. On a terminal a
step that outlives SHOW_AFTER_S gets one status line on stderr, rewritten every second
(`[archive] verify against eager: 14 s, waiting for batch 8 on the artifact`) and closed with the
time it took; quicker steps print nothing. When stderr is not a terminal (logs, CI, pipes) or the
command was given --quiet, nothing is printed at all, so the output a script reads never changes.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

SHOW_AFTER_S = 2.0  # steps quicker than this stay silent
REFRESH_S = 1.0

_quiet = False
_command = "tsvk"


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress lines (they are shown only on a terminal anyway)")


def configure(command: str, quiet: bool) -> None:
    """Called once per command: its name (shown on each line) and its --quiet."""
    global _quiet, _command
    _command, _quiet = command, bool(quiet)


def enabled(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return not _quiet and hasattr(stream, "isatty") and stream.isatty()


class Step:
    """One phase of a command; `waiting_for()` says what it waits on now."""

    def __init__(self, command: str, phase: str, waiting_for: str, stream: TextIO, show: bool):
        self.command, self.phase, self._waiting_for = command, phase, waiting_for
        self._stream, self._show = stream, show
        self._started = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._shown = False
        self._ticker = threading.Thread(target=self._tick, name=f"progress-{phase}", daemon=True) if show else None

    def waiting_for(self, what: str) -> None:
        self._waiting_for = what

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def line(self) -> str:
        waiting = f", waiting for {self._waiting_for}" if self._waiting_for else ""
        return f"[{self.command}] {self.phase}: {self.elapsed():.0f} s{waiting}"

    def _tick(self) -> None:
        if self._done.wait(SHOW_AFTER_S):
            return
        while not self._done.is_set():
            self._write("\r\x1b[K" + self.line())
            self._done.wait(REFRESH_S)

    def _write(self, text: str) -> None:
        with self._lock:
            self._shown = True
            self._stream.write(text)
            self._stream.flush()

    def start(self) -> None:
        if self._ticker:
            self._ticker.start()

    def finish(self, failed: bool) -> None:
        self._done.set()
        if self._ticker:
            self._ticker.join()
        if self._shown:
            outcome = "stopped" if failed else "done"
            self._write(f"\r\x1b[K[{self.command}] {self.phase}: {outcome} in {self.elapsed():.1f} s\n")


@contextmanager
def step(phase: str, waiting_for: str = "", stream: TextIO | None = None) -> Iterator[Step]:
    """Show `phase` of the running command while the block runs (on a terminal, once it passes SHOW_AFTER_S)."""
    stream = stream or sys.stderr
    current = Step(_command, phase, waiting_for, stream, enabled(stream))
    current.start()
    failed = True
    try:
        yield current
        failed = False
    finally:
        current.finish(failed)
