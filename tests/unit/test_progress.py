"""Long steps say what they do on a terminal, and nothing anywhere else."""

from __future__ import annotations

import io
import re
import time

import pytest

from tsvk_tools import cli, progress
from tsvk_tools.lab.bench import bench_cli as bench_run


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def fast_refresh(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.05)
    monkeypatch.setattr(progress, "REFRESH_S", 0.05)
    progress.configure("archive", quiet=False)
    yield
    progress.configure("tsvk", quiet=False)


def test_a_long_step_shows_phase_elapsed_time_and_what_it_waits_for():
    terminal = Terminal()
    began = time.monotonic()
    with progress.step("compile with aoti", "AOTInductor on cpu", stream=terminal) as current:
        time.sleep(0.2)
        current.waiting_for("batch 8 on the artifact")
        time.sleep(0.15)
    ended = time.monotonic()
    shown = terminal.getvalue()
    assert "[archive] compile with aoti: 0 s, waiting for AOTInductor on cpu" in shown
    assert "waiting for batch 8 on the artifact" in shown
    done = re.search(r"\[archive\] compile with aoti: done in (\d+\.\d) s\n$", shown)
    assert done, shown
    assert 0.35 - 0.05 <= float(done.group(1)) <= ended - began + 0.05  # the step's own time, to its one decimal


def test_a_quick_step_prints_nothing():
    terminal = Terminal()
    with progress.step("pack the .mar", stream=terminal):
        pass
    assert terminal.getvalue() == ""


def test_a_failed_step_says_it_stopped_and_lets_the_error_through():
    terminal = Terminal()
    with pytest.raises(RuntimeError), progress.step("verify against eager", stream=terminal):
        time.sleep(0.15)
        raise RuntimeError("boom")
    assert "[archive] verify against eager: stopped in" in terminal.getvalue()


@pytest.mark.parametrize("quiet, stream", [(False, io.StringIO()), (True, Terminal())], ids=["not a terminal", "--quiet"])
def test_silent_off_a_terminal_and_with_quiet(quiet, stream):
    progress.configure("serve", quiet=quiet)
    with progress.step("load the models", "every model READY", stream=stream):
        time.sleep(0.2)
    assert stream.getvalue() == ""


@pytest.mark.parametrize("command", ["archive", "serve", "robustness", "tune"])
def test_every_long_command_takes_quiet(command):
    parser = cli.build_parser()
    extra = {"tune": ["--models", "resnet18"]}.get(command, [])
    assert parser.parse_args([command, *extra, "--quiet"]).quiet


def test_bench_takes_quiet():
    assert bench_run.build_parser().parse_args(["--quiet"]).quiet
