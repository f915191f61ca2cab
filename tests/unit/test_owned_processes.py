"""A pid is trusted only while it is still the process tsvk started: stale pid files are dropped,
reused pids are never signalled, and SIGKILL goes only to what is still ours and still running."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tsvk_tools.keys import RENEWER_PID_FILE, stop_key_renewer
from tsvk_tools.server import PID_FILE, TorchServeRun, find_running, group_is_ours, process_start_time

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(SLEEPER, start_new_session=True)


def test_a_live_group_with_the_recorded_start_time_is_ours():
    child = _sleeper()
    try:
        assert group_is_ours(child.pid, process_start_time(child.pid))
    finally:
        child.kill()
        child.wait()
    assert not group_is_ours(child.pid, process_start_time(child.pid) or 1.0)


def test_a_pid_file_naming_someone_elses_process_is_stale_and_nothing_is_signalled(tmp_path):
    """The pid (a group leader, alive) now belongs to a process that started after the one recorded."""
    child = _sleeper()
    try:
        started = process_start_time(child.pid)
        (tmp_path / PID_FILE).write_text(f"{child.pid}\n{tmp_path / 'c.properties'}\n{started - 1000}\n")
        assert find_running(tmp_path) is None
        assert not (tmp_path / PID_FILE).exists()
        run = TorchServeRun(tmp_path, tmp_path / "c.properties", child.pid, started_at=started - 1000)
        run.stop(drain_timeout=0, kill_timeout=0.5)
        assert child.poll() is None and psutil.pid_exists(child.pid)  # still alive: never signalled
    finally:
        child.kill()
        child.wait()


def test_a_pid_file_without_a_start_time_is_not_trusted(tmp_path):
    child = _sleeper()
    try:
        (tmp_path / PID_FILE).write_text(f"{child.pid}\n{tmp_path / 'c.properties'}\n")
        assert find_running(tmp_path) is None
    finally:
        child.kill()
        child.wait()


def test_stop_terminates_our_own_group_and_sends_no_sigkill_once_it_is_gone(tmp_path, monkeypatch):
    child = _sleeper()
    run = TorchServeRun(tmp_path, tmp_path / "c.properties", child.pid, process=child, started_at=process_start_time(child.pid))
    sent = []
    import tsvk_tools.server as server

    real = server.signal_group
    monkeypatch.setattr(server, "signal_group", lambda pid, sig: (sent.append(sig), real(pid, sig)))
    run.stop(kill_timeout=10)
    assert child.poll() is not None
    assert [int(s) for s in sent] == [15]  # SIGTERM only: the group was gone before any SIGKILL


def test_the_key_renewer_is_stopped_only_while_its_pid_is_still_the_renewer(tmp_path):
    child = _sleeper()
    try:
        (tmp_path / RENEWER_PID_FILE).write_text(f"{child.pid}\n{process_start_time(child.pid) - 1000}\n")
        stop_key_renewer(tmp_path)
        time.sleep(0.2)
        assert child.poll() is None  # a different process under that pid: left alone
        (tmp_path / RENEWER_PID_FILE).write_text(f"{child.pid}\n{process_start_time(child.pid)}\n")
        stop_key_renewer(tmp_path)
        assert child.wait(timeout=10) is not None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
