"""The engine as the child of a container's PID 1 (tools/engines/container.py, `--engine kserve`).

Unlike `tsvk serve --engine kserve` (engine_process.py), the server's output goes to the container's own (what `kubectl logs`
shows), and a stop signals the server alone, never its process group: SIGTERM makes it stop accepting and answer
what it holds (uvicorn's graceful shutdown, bounded by its --drain-timeout) while its workers still run, and only
then does it end them. A worker signalled together with the server would die holding its batch, and those requests
would be answered 503 `worker_died` instead of their answers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from ...processes import signal_group
from ..base import StopResult
from .engine_process import SERVER_MODULE

EXIT_MARGIN_S = 3  # past the drain timeout: the workers' end and the interpreter's exit
POLL_S = 0.1


class EngineChild:
    """The engine's server, started by this process in a session of its own."""

    name = "the kserve engine"

    def __init__(self, process: subprocess.Popen):
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def owned(self) -> bool:
        return self.alive()

    def stop(self, drain_timeout: float) -> StopResult:
        """SIGTERM to the server (SIGKILL to its whole session at once when `drain_timeout` is 0, or when it has not
        exited `drain_timeout` + EXIT_MARGIN_S s later); what happened."""
        if not self.alive():
            signal_group(self.pid, signal.SIGKILL)  # a worker it left behind
            return StopResult(False, f"the engine had exited by itself with status {self.process.wait()}")
        if drain_timeout > 0:
            self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + drain_timeout + EXIT_MARGIN_S
        while drain_timeout > 0 and self.alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        killed = self.alive()
        signal_group(self.pid, signal.SIGKILL)  # whatever of its session is left (a worker it could not end)
        code = self.process.wait()
        if killed:
            when = 'at once' if drain_timeout <= 0 else f'not exited {drain_timeout + EXIT_MARGIN_S:g} s after SIGTERM'
            return StopResult(False, f"the engine was killed ({when})")
        return StopResult(True, f"the engine answered the requests it held and exited with status {code}")


def start_engine_child(config: Path, run_dir: Path, drain_timeout: float) -> EngineChild:
    """The engine's server on `config`, its unpacked archives, status and workers' log under `run_dir`."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--config",
        str(config),
        "--run-dir",
        str(run_dir),
        "--drain-timeout",
        f"{drain_timeout:g}",
    ]
    return EngineChild(subprocess.Popen(command, cwd=run_dir, start_new_session=True))
