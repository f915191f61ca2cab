"""A pid is trusted only while it is still the process tsvk started: stale pid files are dropped,
reused pids are never signalled, and SIGKILL goes only to what is still ours and still running."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tsvk_tools import processes
from tsvk_tools.keys import RENEWER_PID_FILE, stop_key_renewer
from tsvk_tools.processes import process_start_time
from tsvk_tools.engines.torchserve.server import PID_FILE, TorchServeRun, find_running, group_is_ours

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
    real = processes.signal_group
    monkeypatch.setattr(processes, "signal_group", lambda pid, sig: (sent.append(sig), real(pid, sig)))
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


def test_a_pid_file_reads_back_the_process_it_records_and_its_notes(tmp_path):
    child = _sleeper()
    try:
        owned = processes.Owned(child.pid, process_start_time(child.pid))
        processes.write_pid_file(tmp_path / "x.pid", owned, "a note")
        assert processes.read_pid_file(tmp_path / "x.pid", notes=1) == (owned, ["a note"])
        assert processes.recorded_if_ours(tmp_path / "x.pid", notes=1) == (owned, ["a note"])
    finally:
        child.kill()
        child.wait()
    assert processes.recorded_if_ours(tmp_path / "x.pid", notes=1) is None  # gone: the stale file is removed
    assert not (tmp_path / "x.pid").exists()


def test_a_started_child_is_stopped_with_its_group_and_reaped(tmp_path):
    command = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
               "'import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)"]
    child = processes.start_detached(command, tmp_path / "out.log", cwd=tmp_path)
    deadline = time.monotonic() + 30
    while "up" not in (tmp_path / "out.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.is_ours() and processes.group_alive(child.pid)
    child.stop(timeout=10)
    assert child.process.returncode is not None and not processes.group_alive(child.pid)
    assert child.log_tail() == "up"


def test_nothing_is_signalled_for_a_record_whose_start_time_does_not_match():
    child = _sleeper()
    try:
        stale = processes.Owned(child.pid, process_start_time(child.pid) - 1000)
        assert not processes.signal_if_ours(stale, 9)
        processes.stop_group(stale, timeout=0.3)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_failed_start_up_step_stops_what_was_started():
    stopped = []
    try:
        with processes.stopped_on_failure(lambda: stopped.append(True)):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert stopped == [True]


def test_sigterm_unwinds_through_finally_where_exit_on_sigterm_is_installed(tmp_path):
    marker = tmp_path / "stopped"
    program = ("import sys, time\nfrom tsvk_tools.processes import exit_on_sigterm\nexit_on_sigterm()\n"
               f"try:\n    print('ready', flush=True)\n    time.sleep(60)\nfinally:\n    open({str(marker)!r}, 'w').write('cleaned up')\n")
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    child.terminate()
    assert child.wait(timeout=30) == 128 + 15
    assert marker.read_text() == "cleaned up"
