"""A self-timed bench row's CPU per image is read over the seconds its rate counts, not over its whole run: a `tsvk
batch` or ceiling run that idles while it loads would otherwise look cheaper per image than it is."""

import subprocess
import sys
import time
from types import SimpleNamespace

from tsvk_tools.lab.bench.harness import measure_variant
from tsvk_tools.lab.bench.systems.base import System
from tsvk_tools.measure.sampler import LOAD_GENERATOR

IDLE_THEN_BUSY = ("import time; time.sleep(1.5); print('busy', flush=True); end = time.monotonic() + 1.5\n"
                  "while time.monotonic() < end: pass")


class _LoadsThenWorks(System):
    """A child that idles (as a start-up spent waiting) and then keeps one vCPU busy (its measured load)."""

    name = "loads_then_works"
    self_timed = True

    def __init__(self, gives_window: bool):
        self.gives_window = gives_window

    def run(self, ctx, variant: dict) -> dict:
        child = subprocess.Popen([sys.executable, "-c", IDLE_THEN_BUSY], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "busy"
        started = time.monotonic()
        child.wait()
        measured = {"requests": 10, "errors": 0, "throughput_ips": 10.0}
        if self.gives_window:
            measured["load_window"] = (started + 0.2, time.monotonic() - 0.2)  # inside the busy seconds
        return measured


CTX = SimpleNamespace(options=SimpleNamespace(as_sent=False))


def test_the_cpu_is_read_over_the_span_the_rate_counts():
    measured = measure_variant(_LoadsThenWorks(gives_window=True), CTX, {})
    system_cpu = sum(pct for kind, pct in measured["mean_cpu_pct_by_process"].items() if kind != LOAD_GENERATOR)
    assert system_cpu > 75  # one vCPU busy over the window; over the whole run it would read about half that
    assert "load_window" not in measured


def test_a_run_that_gives_no_span_has_no_cpu_per_image():
    measured = measure_variant(_LoadsThenWorks(gives_window=False), CTX, {})
    assert measured["mean_cpu_pct_by_process"] == {}
    assert measured["peak_cpu_pct"] > 75  # its peaks are still read over its whole life
