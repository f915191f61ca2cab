"""Start, find, wait for and stop the engine's server from the command line (`tsvk serve|stop|status|predict`).

The engine runs in a process session of its own, like TorchServe under `tsvk serve` (tools/engines/torchserve/server.py;
both are a run of tools/engines/shared/run.py), its pid and start time in the run directory's `engine.pid`; it is
stopped by signalling exactly that session, and only while it is still the process that was started. Its run looks
like a TorchServe's to the clients (`url`, `keys`, `headers`), so `tsvk predict` and `tsvk keys` work unchanged.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import ClassVar

from ... import defaults
from ...config.allocator import allocator_env
from ...errors import UsageError
from ...keys import KEY_FILE
from ...oip.config import ADDRESS_KEY, GRPC_PORT_KEY, is_oip_config
from ...processes import start_detached, stop_group, write_pid_file
from ..base import StopResult
from ..shared.run import PRIVATE_UMASK, ServerRun, checked_start, find_run, make_private_dir, ping_ok
from .files import LOG, PID_FILE, WORKER_MARKER

ENGINE = "kserve"
SERVER_MODULE = "tsvk_tools.engines.kserve"
MARKERS = (SERVER_MODULE, WORKER_MARKER)
_REFUSAL = re.compile(r"not serving .+")  # an archive's name, or a refused entry of the config (its name quoted)


class EngineRun(ServerRun):
    """The engine started from a run directory: a run as clients see any engine's, started and stopped its own way."""

    engine: ClassVar[str] = ENGINE
    markers: ClassVar[tuple[str, ...]] = MARKERS
    console_log: ClassVar[str] = LOG
    pid_file: ClassVar[str] = PID_FILE

    def wait_ready(self, models: list[str] | None = None, timeout: float = 300) -> None:
        """Until /ping says Healthy (every model the engine serves has its workers), or the engine exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise UsageError(f"the engine exited during start-up; see {self.run_dir / 'logs' / LOG}:\n{self.log_tail()}")
            if ping_ok(self):
                return
            time.sleep(0.2)
        raise UsageError(f"the engine was not ready after {timeout:.0f} s; see {self.run_dir / 'logs'}:\n{self.log_tail()}")

    def oip_urls(self) -> tuple[str, str]:
        """The Open Inference Protocol: REST on the inference address; gRPC where the config serves the protocol."""
        properties = self.properties
        if not is_oip_config(properties):
            raise UsageError(f"{self.config} serves the Open Inference Protocol over REST only (at {self.url('inference')}); "
                             "for gRPC too, write it with `tsvk config --protocol oip`")
        host = properties.get(ADDRESS_KEY, defaults.OIP_ADDRESS)
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return self.url("inference"), f"{host}:{properties[GRPC_PORT_KEY]}"

    def refusals(self) -> list[str]:
        """The one-line refusals of this start (archives it cannot serve), as its log says them."""
        return [m.group(0) for m in _REFUSAL.finditer(self.stdout_since_start())]

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.stdout_since_start().splitlines()[-lines:])

    def stop(self, drain_timeout: float = defaults.DRAIN_TIMEOUT_S, kill_timeout: float = defaults.STOP_GRACE_S):
        """SIGTERM: the engine stops accepting, answers what it holds and ends its workers; SIGKILL to what is still
        ours `drain_timeout` + `kill_timeout` s later."""
        stop_group(self.owned_process, drain_timeout + kill_timeout, self.process)
        for name in (PID_FILE, KEY_FILE):
            (self.run_dir / name).unlink(missing_ok=True)
        return StopResult(None, f"stopped engine kserve (pid {self.pid}); it answered what it held before its workers ended")


def start_engine(config: Path, run_dir: Path, allocator: str = defaults.ALLOCATOR, env: dict[str, str] | None = None) -> EngineRun:
    """Start the engine on `config` in the background, in its own session, its server and workers on `allocator`
    (tools/config/allocator.py: the fork server and so every worker inherit it) with `env` added to this environment;
    refuses if this run dir has a live one."""
    config, run_dir = checked_start(EngineRun, config, run_dir, "an engine")
    make_private_dir(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    child = start_detached([sys.executable, "-m", SERVER_MODULE, "--config", str(config), "--run-dir", str(run_dir)],
                           run_dir / "logs" / LOG, cwd=run_dir, env={**os.environ, **allocator_env(allocator), **(env or {})},
                           umask=PRIVATE_UMASK, markers=MARKERS)
    write_pid_file(run_dir / PID_FILE, child.owned, str(config))
    return EngineRun(run_dir, config, child.pid, child.process, child.owned.started_at, child.log_offset)


def find_engine(run_dir: Path) -> EngineRun | None:
    return find_run(EngineRun, run_dir)
