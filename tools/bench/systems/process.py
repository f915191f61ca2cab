"""Start a server command in its own process session and stop exactly that session."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import requests

from ...server import group_alive, group_is_ours, process_start_time, signal_group


class ServerProcess:
    def __init__(self, command: list[str], env: dict[str, str], log: Path, cwd: Path):
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.started_at = process_start_time(self.process.pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the session (server and workers), SIGKILL what is left after `timeout`, and only while
        the session is still the one started here (see server.group_is_ours)."""
        if self._ours():
            signal_group(self.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and group_alive(self.process.pid):
            self.process.poll()
            time.sleep(0.2)
        if group_alive(self.process.pid) and self._ours():
            signal_group(self.process.pid, signal.SIGKILL)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _ours(self) -> bool:
        return self.process.poll() is None or group_is_ours(self.process.pid, self.started_at)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def wait_until(ready, server: ServerProcess, timeout: float, what: str, poll_s: float = 0.2) -> None:
    """Poll `ready()` until it is true; fail early (with the server's log) if the server died."""
    from ...errors import UsageError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise UsageError(f"{what} exited during start-up:\n{server.log_tail()}")
        if ready():
            return
        time.sleep(poll_s)
    raise UsageError(f"{what} not ready after {timeout:.0f} s:\n{server.log_tail()}")


def http_ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without thread settings (each system gets the ones it is specified with)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(extra)
    return env


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")
