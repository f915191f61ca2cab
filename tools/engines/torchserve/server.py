"""Start, wait for, and stop a TorchServe of our own, leaving any other TorchServe alone.

TorchServe keeps one pid file in the system temp dir and writes key_file.json to its working
directory, so two of them collide. Each run here gets its own directory (working dir, temp dir,
logs, key file), runs in its own process session, and is stopped by signalling exactly that session.
A pid is only trusted while it is still the process we started (tools/processes.py): the pid file records
its start time, and a pid that now belongs to another process (pids are reused) is never signalled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import psutil

from tsvk.common import ServedConfig
from tsvk.worker import STOP_MARKER_ENV

from ... import defaults
from ...config.allocator import allocator_env
from ...errors import PortTaken, UsageError
from ...extras import missing_extra
from ...keys import KEY_FILE, stop_key_renewer
from ...oip.process import stop_front
from ...processes import start_detached, stop_group, write_pid_file
from ...processes import group_is_ours as _group_is_ours
from ..shared.run import PRIVATE_UMASK, ServerRun, checked_start, find_run, get, make_private_dir, ping_ok
from ..shared.drain import DrainReport, drain
from ..shared.listeners import NOT_CLOSED, client_listeners, stop_accepting, unread_connections
from .drain import AccessLog, TorchServeCounts, frontend_pid

PID_FILE = "torchserve.pid"
STOP_MARKER = "stopping"  # created when a stop has answered what was taken in: workers refuse the rest (tsvk/worker/stopping.py)
# TorchServe's frontend talks to each worker over the Unix socket <java.io.tmpdir>/.ts.sock.<port>; the port
# counts up from initial_worker_port (9000) with every worker started (WorkLoadManager's AtomicInteger), so
# 4 digits for the first 1000 starts. Linux refuses a socket path longer than 107 bytes (sun_path holds 108
# with its NUL).
WORKER_SOCKET_NAME = ".ts.sock.9999"
UNIX_SOCKET_PATH_MAX = 107
BIND_FAILURE = "Address already in use"  # what the JVM logs when a port of the config is taken
_FAILED_ADDRESS = re.compile(r"Failed to bind to address:? (\S+)")  # and the address it names (REST and gRPC)
# The command-line word of a TorchServe worker (ts/model_service_worker.py).
WORKER_MARKER = "model_service_worker"
# Command-line words of a TorchServe frontend or one of its workers: what may remain in our group.
TORCHSERVE_MARKERS = ("org.pytorch.serve.ModelServer", WORKER_MARKER, "torchserve")


TORCHSERVE = "torchserve"  # the engine's name (tools/engines/registry.py)


@dataclass
class TorchServeRun(ServerRun):
    """A TorchServe of our own: started with `start_torchserve`, found with `find_running`."""

    engine: ClassVar[str] = TORCHSERVE
    markers: ClassVar[tuple[str, ...]] = TORCHSERVE_MARKERS
    console_log: ClassVar[str] = "stdout.log"
    pid_file: ClassVar[str] = PID_FILE

    def wait_ready(self, models: list[str] | None = None, timeout: float = 300) -> None:
        """Until /ping is healthy and every model has all its workers READY, or the server dies."""
        models = models if models is not None else _configured_models(self.properties)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._start_failure()
            if ping_ok(self) and all(_model_ready(self, m) for m in models):
                return
            time.sleep(1)
        raise UsageError(f"TorchServe not ready after {timeout:.0f} s; see {self.run_dir / 'logs'}:\n{self.log_tail()}")

    def _start_failure(self) -> UsageError:
        """Why TorchServe exited during start-up: a port taken since it was chosen, said as such, or its log."""
        logs = self.run_dir / "logs"
        output = self.stdout_since_start()
        if BIND_FAILURE in output:
            address = _FAILED_ADDRESS.search(output)
            return PortTaken(f"TorchServe could not bind {address.group(1) if address else 'a port'} of {self.config}: another "
                             f"process holds it ({BIND_FAILURE}); free it, or write the config with another port (make config "
                             f"INFERENCE_ADDRESS=http://0.0.0.0:8090, MANAGEMENT_ADDRESS, METRICS_ADDRESS, GRPC_INFERENCE_PORT, "
                             f"GRPC_MANAGEMENT_PORT: docs/commands.md), then start again; see {logs}")
        return UsageError(f"TorchServe exited during start-up; see {logs}:\n{self.start_output_tail()}")

    def start_output_tail(self, lines: int = 25) -> str:
        """The logs' ends and this start's own console output: a launcher that fails before TorchServe logs
        anything (no Java, a broken JAVA_HOME) says why only on stdout."""
        console = self.stdout_since_start().strip().splitlines()[-lines:]
        return "\n".join(filter(None, [self.log_tail(lines), *(["--- stdout.log", *console] if console else [])]))

    def log_tail(self, lines: int = 25) -> str:
        logs = sorted((self.run_dir / "logs").glob("*.log"))
        text = []
        for log in logs:
            if log.name in ("model_log.log", "ts_log.log"):
                text += [f"--- {log.name}"] + log.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    def stop(self, drain_timeout: float = defaults.DRAIN_TIMEOUT_S, kill_timeout: float = defaults.STOP_GRACE_S) -> DrainReport | None:
        """Drain, then stop (tools/engines/torchserve/drain.py): the OIP front first; then TorchServe stops accepting, answers every
        request it had taken in, refuses the rest with a 503 and, once it holds none (at most `drain_timeout` s
        in all), gets SIGTERM to our process session, and SIGKILL to what is still ours and running
        `kill_timeout` s later (after the drain nothing in flight depends on TorchServe's own slow shutdown).
        Nothing is signalled once the pid is no longer ours."""
        stop_front(self.run_dir, timeout=max(drain_timeout, 1))
        report = None
        frontend = frontend_pid(self.pid) if self.owned() else None
        if frontend is not None:
            listeners = client_listeners(frontend, self._kept_ports())
            closed = stop_accepting(frontend, listeners) if drain_timeout > 0 else NOT_CLOSED
            client_ports = set(listeners.values())
            report = drain(TorchServeCounts(AccessLog(self.run_dir / "logs"), self.url("metrics"), self.client_tls), self._refuse_new,
                           drain_timeout, closed, unread=lambda: unread_connections(frontend, client_ports))
        stop_group(self.owned_process, kill_timeout, self.process)
        stop_key_renewer(self.run_dir)
        for name in (PID_FILE, KEY_FILE, STOP_MARKER):
            (self.run_dir / name).unlink(missing_ok=True)
        return report

    def _refuse_new(self) -> None:
        (self.run_dir / STOP_MARKER).touch()

    def _kept_ports(self) -> set[int]:
        """The APIs that stay open while stopping: the drain reads the metrics; management is not client traffic."""
        return {int(self.url(api).rsplit(":", 1)[1].split("/")[0]) for api in ("management", "metrics")}


def workers_below(pid: int, marker: str = WORKER_MARKER) -> list[psutil.Process]:
    """The workers among process `pid`'s descendants, TorchServe's unless `marker` names another engine's command-line
    word (none once it has exited)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    workers = []
    for child in children:
        try:
            if marker in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:  # exited between the listing and the reading
            continue
    return workers


def start_torchserve(config: Path, run_dir: Path, env: dict[str, str] | None = None,
                     allocator: str = defaults.ALLOCATOR) -> TorchServeRun:
    """Start TorchServe in the background in its own session, its frontend and workers on `allocator`
    (tools/config/allocator.py); refuses if this run dir has a live one."""
    config, run_dir = checked_start(TorchServeRun, config, run_dir, "a TorchServe")
    check_worker_socket_path(run_dir)
    make_private_dir(run_dir)
    for sub in ("tmp", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / STOP_MARKER).unlink(missing_ok=True)  # a stop that was killed may have left it: workers would refuse all
    child = start_detached([_torchserve_bin(), "--start", "--foreground", "--ncs", "--ts-config", str(config)],
                           run_dir / "logs" / "stdout.log", cwd=run_dir,
                           env=_server_env(run_dir, {**allocator_env(allocator), STOP_MARKER_ENV: str(run_dir / STOP_MARKER),
                                                     **(env or {})}),
                           umask=PRIVATE_UMASK, markers=TORCHSERVE_MARKERS)
    write_pid_file(run_dir / PID_FILE, child.owned, str(config))
    return TorchServeRun(run_dir, config, child.pid, child.process, child.owned.started_at, child.log_offset)


def worker_socket_overflow(run_dir: Path) -> tuple[Path, int] | None:
    """The longest worker socket path under `run_dir` and its length in bytes, when it passes Linux's limit."""
    longest = Path(run_dir) / "tmp" / WORKER_SOCKET_NAME
    size = len(os.fsencode(longest))
    return (longest, size) if size > UNIX_SOCKET_PATH_MAX else None


def check_worker_socket_path(run_dir: Path) -> None:
    """Refuse a run dir whose workers' socket paths would pass Linux's limit (TorchServe would fail obscurely)."""
    if (overflow := worker_socket_overflow(run_dir)) is not None:
        longest, size = overflow
        raise UsageError(f"--run-dir {run_dir} is too deep: TorchServe's worker sockets ({longest}) would be "
                         f"{size} bytes; Unix sockets allow at most {UNIX_SOCKET_PATH_MAX}. "
                         "Choose a shorter --run-dir")


def find_running(run_dir: Path) -> TorchServeRun | None:
    """The TorchServe started from `run_dir`, if its pid file names a process group that is still ours."""
    return find_run(TorchServeRun, run_dir)


def group_is_ours(pgid: int, started_at: float | None) -> bool:
    """Whether process group `pgid` is still the TorchServe we started at `started_at` (its leader, or only
    TorchServe processes left in it that started no earlier: see `processes.group_is_ours`)."""
    return _group_is_ours(pgid, started_at, TORCHSERVE_MARKERS)


def _torchserve_bin() -> str:
    """This venv's torchserve, else the one on PATH; TorchServe is an extra, so its absence is said in one line."""
    local = Path(sys.executable).with_name("torchserve")
    found = str(local) if local.exists() else shutil.which("torchserve")
    if found is None:
        raise missing_extra("the TorchServe engine (tsvk's own, --engine kserve, needs neither it nor Java)", "torchserve")
    return found


def _server_env(run_dir: Path, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "TMPDIR": str(run_dir / "tmp"),  # TorchServe's pid file lives here: ours alone
        "TEMP": str(run_dir / "tmp"),  # java.io.tmpdir: where archives are unpacked
        "LOG_LOCATION": str(run_dir / "logs"),
        "METRICS_LOCATION": str(run_dir / "logs"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # workers use this python
    })
    env.update(extra or {})
    return env


def _configured_models(properties: dict[str, str]) -> list[str]:
    return list(ServedConfig.of(properties).model_names)


def _model_ready(run: TorchServeRun, model: str) -> bool:
    status, body = get(f"{run.url('management')}/models/{model}", run.headers("management"), run.client_tls)
    if status != 200:
        return False
    info = json.loads(body)[0]
    workers = info.get("workers", [])
    return len(workers) >= info.get("minWorkers", 1) and all(w.get("status") == "READY" for w in workers)

