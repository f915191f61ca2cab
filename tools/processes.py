"""A process we started, and only that: start it detached, record it, recognise it later, signal it, reap it.

tsvk starts TorchServe, its key renewer, the Open Inference Protocol front and the benchmarks' servers as
children in a process session of their own (one signal then reaches a server and every worker it forked),
and records each one's pid with its start time in a pid file. Later, maybe from another tsvk process, a pid
is trusted only while it is still that process: pids are reused, and a reused pid starts later than the one
recorded. Nothing here signals a pid or a process group that fails that check, and nothing picks processes
by the name or command line they run under.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import psutil

START_TIME_TOLERANCE_S = 0.05  # psutil's start times are rounded to the clock tick; a reused pid starts much later
STOP_POLL_S = 0.1


@dataclass(frozen=True)
class Owned:
    """A process we started: its pid (also its process group and session id) and its start time.

    `markers`: words of the command lines that may remain in its group once the leader has exited (a server's
    workers); without markers, the group is ours only while its leader is."""

    pid: int
    started_at: float | None
    markers: tuple[str, ...] = ()

    def leader_is_ours(self) -> bool:
        """Whether the pid still names the process we started (a zombie of it counts until it is reaped)."""
        return is_same_process(self.pid, self.started_at)

    def group_is_ours(self) -> bool:
        return group_is_ours(self.pid, self.started_at, self.markers)


@dataclass
class Child:
    """A process this process started: the handle to reap it, and what identifies it to later processes."""

    process: subprocess.Popen = field(repr=False)
    owned: Owned
    log: Path
    log_offset: int = 0  # where this start's output begins in its log (earlier starts append there too)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def is_ours(self) -> bool:
        """Ours while it runs; once it has exited, only while its group still passes `group_is_ours`."""
        return self.alive() or self.owned.group_is_ours()

    def stop(self, timeout: float = 30) -> None:
        stop_group(self.owned, timeout, self.process)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])


def start_detached(command: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None,
                   umask: int = -1, markers: tuple[str, ...] = ()) -> Child:
    """Start `command` in a session of its own, its output appended to `log`, and note its start time."""
    with open(log, "ab") as out:
        offset = out.tell()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, umask=umask)
    return Child(process, Owned(process.pid, process_start_time(process.pid), markers), Path(log), offset)


def write_pid_file(path: Path, owned: Owned, *notes: str) -> None:
    """One line with the pid, one per note, one with the start time (empty when it could not be read)."""
    started_at = "" if owned.started_at is None else repr(owned.started_at)
    Path(path).write_text("".join(f"{line}\n" for line in (owned.pid, *notes, started_at)))


def read_pid_file(path: Path, notes: int = 0, markers: tuple[str, ...] = ()) -> tuple[Owned, list[str]] | None:
    """The process a pid file records and its `notes` lines; None when the file is missing or unreadable.
    A file without a start time reads as a process that is never ours."""
    try:
        lines = Path(path).read_text().splitlines()
        stamp = (lines + [""] * (notes + 2))[notes + 1]
        owned = Owned(int(lines[0]), float(stamp) if stamp else None, markers)
    except (OSError, ValueError, IndexError):
        return None
    return owned, (lines[1:] + [""] * notes)[:notes]


def recorded_if_ours(path: Path, notes: int = 0, markers: tuple[str, ...] = ()) -> tuple[Owned, list[str]] | None:
    """What `path` records, while that group is still ours; a stale or unreadable pid file is removed."""
    recorded = read_pid_file(path, notes, markers)
    if recorded is None or not recorded[0].group_is_ours():
        Path(path).unlink(missing_ok=True)
        return None
    return recorded


def net_connections(process: psutil.Process, kind: str = "inet") -> list:
    """A process's sockets. psutil 6 renamed connections() net_connections(); kserve holds an install that pip
    resolves to psutil 5.9, while requirements.txt pins 7, so tsvk asks whichever this psutil has."""
    read = getattr(process, "net_connections", None) or process.connections
    return read(kind)


def process_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_same_process(pid: int, started_at: float | None) -> bool:
    current = process_start_time(pid)
    return started_at is not None and current is not None and abs(current - started_at) < START_TIME_TOLERANCE_S


def group_is_ours(pgid: int, started_at: float | None, markers: tuple[str, ...] = ()) -> bool:
    """Whether process group `pgid` is still the one we started at `started_at`.

    While the leader lives, its start time must match (a reused pid starts later). Once the leader is gone,
    Linux does not hand its pid to a new process while the group still has members, but a group of that id
    may still have been formed by another process since; so the members left must all carry one of
    `markers` in their command line and have started no earlier than ours."""
    if started_at is None or not group_alive(pgid):
        return False
    leader_start = process_start_time(pgid)
    if leader_start is not None:
        return abs(leader_start - started_at) < START_TIME_TOLERANCE_S
    members = [p for p in psutil.process_iter(["pid", "cmdline", "create_time"]) if _pgid(p.pid) == pgid]
    return bool(members) and all(_carries_marker(m, markers) and m.info["create_time"] >= started_at - START_TIME_TOLERANCE_S
                                 for m in members)


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to a process group; callers check it is ours first."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_if_ours(owned: Owned, sig: int) -> bool:
    """Send `sig` to the recorded process's group only while its leader is still the process we started."""
    if not owned.leader_is_ours():
        return False
    signal_group(owned.pid, sig)
    return True


def stop_group(owned: Owned, timeout: float, child: subprocess.Popen | None = None) -> None:
    """SIGTERM the group while it is ours; SIGKILL what is still ours and running `timeout` s later.
    `child`: our own handle on the leader, reaped on the way so it does not linger as a zombie."""
    ours = lambda: (child is not None and child.poll() is None) or owned.group_is_ours()  # noqa: E731
    if ours():
        signal_group(owned.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _group_running(owned.pid, child):
        time.sleep(STOP_POLL_S)
    if _group_running(owned.pid, child) and ours():
        signal_group(owned.pid, signal.SIGKILL)
    if child is not None:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def reap(pid: int) -> bool:
    """Whether our child `pid` has exited, reaping it if so (a zombie still has a start time)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child, or already reaped
        return not _running(pid)
    return done == pid or not _running(pid)


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process as `exit(128 + 15)` does, unwinding: the `finally` blocks and
    `stopped_on_failure` then stop what it started (Python's default ends it at once, leaving them running)."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@contextmanager
def stopped_on_failure(stop: Callable[[], object]) -> Iterator[None]:
    """Around the steps after a start: if one fails, or Ctrl+C / SIGTERM arrives, stop what was started and re-raise,
    so nothing is left running."""
    try:
        yield
    except BaseException:
        stop()
        raise


def _group_running(pgid: int, child: subprocess.Popen | None) -> bool:
    if child is not None:
        child.poll()  # reap our own leader so an exited group does not look alive
    else:
        reap(pgid)
    return group_alive(pgid)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _carries_marker(process: psutil.Process, markers: tuple[str, ...]) -> bool:
    words = " ".join(process.info.get("cmdline") or [])
    return any(marker in words for marker in markers)
