"""How the image's PID 1 stops the kserve engine (tools/engines/kserve/child.py), on real processes standing in for
the engine's server: one that exited by itself, one that ignores SIGTERM, one that ends on it."""

from __future__ import annotations

import subprocess
import time

from tsvk_tools.engines.base import StopResult
from tsvk_tools.engines.kserve.child import EXIT_MARGIN_S, EngineChild


def _child(script: str) -> EngineChild:
    child = EngineChild(subprocess.Popen(["sh", "-c", script], start_new_session=True))
    time.sleep(0.3)  # the shell has set its traps
    return child


def test_an_engine_that_exited_by_itself_is_said_so_with_its_status():
    child = _child("exit 3")
    time.sleep(0.2)
    assert child.stop(drain_timeout=10) == StopResult(False, "the engine had exited by itself with status 3")


def test_an_engine_that_ignores_sigterm_is_killed_after_the_drain_timeout_and_margin():
    child = _child("trap '' TERM; sleep 60 & wait; sleep 60")
    began = time.monotonic()
    said = child.stop(drain_timeout=0.5)
    took = time.monotonic() - began
    assert "killed" in said.said and said.drained is False and not child.alive()
    assert 0.5 + EXIT_MARGIN_S - 0.2 < took < 0.5 + EXIT_MARGIN_S + 3


def test_an_engine_that_ends_on_sigterm_is_waited_for_not_killed():
    child = _child("trap 'exit 0' TERM; sleep 60 & wait")
    said = child.stop(drain_timeout=10)
    assert said == StopResult(True, "the engine answered the requests it held and exited with status 0")


def test_at_once_kills_without_a_drain():
    child = _child("trap '' TERM; sleep 60 & wait")
    began = time.monotonic()
    assert child.stop(drain_timeout=0) == StopResult(False, "the engine was killed (at once)")
    assert time.monotonic() - began < 2
