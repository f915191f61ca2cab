"""Start, wait for and stop the front next to a TorchServe of our own, the way the key renewer is.

The front runs in its own process session, its pid and start time recorded in the TorchServe's run
directory; it is stopped with TorchServe (`TorchServeRun.stop`, `tsvk stop`), and only while that pid is
still the process we started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import UsageError
from .config import FrontConfig, read_front_config

FRONT_PID_FILE = "oip-front.pid"
FRONT_LOG = "oip-front.log"


def start_front(config_path: Path, run_dir: Path, env: dict[str, str] | None = None) -> int:
    """Start the front on `config_path`'s settings (checked here first, so a bad config fails in this process)."""
    from ..server import process_start_time

    read_front_config(config_path)
    run_dir = Path(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tsvk_tools.oip", "--ts-config", str(Path(config_path).resolve()), "--run-dir", str(run_dir.resolve())]
    with open(run_dir / "logs" / FRONT_LOG, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=run_dir,
                                   env={**os.environ, **(env or {})})
    (run_dir / FRONT_PID_FILE).write_text(f"{process.pid}\n{process_start_time(process.pid) or ''}\n")
    return process.pid


def wait_front_ready(config: FrontConfig, run_dir: Path, timeout: float = 60) -> None:
    """Until the front's /v2/health/ready says 200, or its process is gone."""
    url = f"http://{_host(config.address)}:{config.rest_port}/v2/health/ready"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = front_pid(run_dir)
        if pid is None or _exited(pid):
            raise UsageError(f"the Open Inference Protocol front exited during start-up; see {Path(run_dir) / 'logs' / FRONT_LOG}:\n"
                             f"{_log_tail(run_dir)}")
        if _status(url) == 200:
            return
        time.sleep(0.5)
    raise UsageError(f"the Open Inference Protocol front was not ready after {timeout:.0f} s; see {Path(run_dir) / 'logs' / FRONT_LOG}")


def front_pid(run_dir: Path) -> int | None:
    """The front's pid while it is still the process we started, else None."""
    from ..server import process_start_time

    try:
        pid_text, stamp = ((Path(run_dir) / FRONT_PID_FILE).read_text().splitlines() + [""])[:2]
        pid, started_at = int(pid_text), float(stamp)
    except (OSError, ValueError):
        return None
    current = process_start_time(pid)
    return pid if current is not None and abs(current - started_at) < 0.05 else None


def stop_front(run_dir: Path, timeout: float = 15) -> None:
    """SIGTERM the front's session; SIGKILL it only if it is still ours after `timeout`."""
    from ..server import signal_group

    pid = front_pid(run_dir)
    if pid is not None:
        signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and front_pid(run_dir) is not None and not _exited(pid):
            time.sleep(0.2)
        if front_pid(run_dir) is not None and not _exited(pid):
            signal_group(pid, signal.SIGKILL)
    (Path(run_dir) / FRONT_PID_FILE).unlink(missing_ok=True)


def _exited(pid: int) -> bool:
    """Reap our own child if it has exited (a zombie still has a start time)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not _running(pid)
    return done == pid or not _running(pid)


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _host(address: str) -> str:
    if address in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{address}]" if ":" in address else address


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return 0


def _log_tail(run_dir: Path, lines: int = 25) -> str:
    try:
        return "\n".join((Path(run_dir) / "logs" / FRONT_LOG).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def front_urls(config: FrontConfig) -> tuple[str, str]:
    """The REST base URL and the gRPC target clients on this machine use."""
    host = _host(config.address)
    return f"http://{host}:{config.rest_port}", f"{host}:{config.grpc_port}"
