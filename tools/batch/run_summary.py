"""What a batch run shows while it runs and says at its end: inputs done of all, the rate, the time left, and
the outcome of every input by code.

On a terminal one bar is rewritten every second; elsewhere (a log, CI) a plain line is written every
LOG_EVERY_S, so a log shows progress without a screenful of carriage returns. --quiet shows neither.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from typing import TextIO

LOG_EVERY_S = 30.0
BAR_WIDTH = 24
OUTCOME = re.compile(r'", "status": (\d+), "code": (?:null|"([^"]*)")')  # a row's status and code (scorer.row)
OK = "ok"


class Progress:
    """Counts rows as they are written and shows how far the run is."""

    def __init__(self, total: int, already: int, stream: TextIO | None = None, quiet: bool = False):
        self.total, self.already = total, already
        self.stream = stream or sys.stderr
        self.terminal = not quiet and self.stream.isatty()
        self.logging = not quiet and not self.terminal
        self.outcomes: Counter[str] = Counter()
        self.started = time.monotonic()
        self.shown = 0.0

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    def add(self, rows: list[str]) -> None:
        for line in rows:
            match = OUTCOME.search(line)
            self.outcomes[(match.group(2) or OK) if match else "unknown"] += 1
        self.show()

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        finished = self.already + self.done
        share = finished / self.total if self.total else 1.0
        rate = self.rate()
        left = (self.total - finished) / rate if rate > 0 else float("inf")
        filled = int(BAR_WIDTH * share)
        return (f"[batch] [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {finished}/{self.total} ({100 * share:.1f}%) "
                f"{rate:.1f} img/s, ETA {_duration(left)}, failed {self.done - self.outcomes[OK]}")

    def show(self, final: bool = False) -> None:
        now = time.monotonic()
        every = 1.0 if self.terminal else LOG_EVERY_S
        if not (self.terminal or self.logging) or (now - self.shown < every and not final):
            return
        self.shown = now
        ending = "\n" if final or not self.terminal else ""
        self.stream.write(("\r\x1b[K" if self.terminal else "") + self.line() + ending)
        self.stream.flush()

    def summary(self) -> str:
        """Done, failed by code, images/s: the run's last lines."""
        elapsed = time.monotonic() - self.started
        failed = {code: n for code, n in sorted(self.outcomes.items()) if code != OK}
        lines = [f"done: {self.already + self.done} of {self.total} inputs ({self.done} in this run, "
                 f"{self.already} before it)",
                 f"answered: {self.outcomes[OK]}; failed: {sum(failed.values())}"
                 + (" (" + ", ".join(f"{code} {n}" for code, n in failed.items()) + ")" if failed else ""),
                 f"rate: {self.rate():.2f} images/s over {elapsed:.1f} s"]
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
