"""Start, wait for and stop the front next to a TorchServe of our own, the way the key renewer is.

The front runs in its own process session, its pid and start time recorded in the TorchServe's run
directory; it is stopped with TorchServe (`TorchServeRun.stop`, `tsvk stop`), and only while that pid is
still the process we started.
"""

from __future__ import annotations

import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import UsageError
from ..processes import read_pid_file, reap, start_detached, stop_group, write_pid_file
from ..tls import raise_if_unverified, verifying
from .config import FrontConfig, read_front_config

FRONT_PID_FILE = "oip-front.pid"
FRONT_LOG = "oip-front.log"


def start_front(config_path: Path, run_dir: Path, env: dict[str, str] | None = None) -> int:
    """Start the front on `config_path`'s settings (checked here first, so a bad config fails in this process)."""
    read_front_config(config_path)
    run_dir = Path(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tsvk_tools.oip", "--ts-config", str(Path(config_path).resolve()), "--run-dir", str(run_dir.resolve())]
    child = start_detached(command, run_dir / "logs" / FRONT_LOG, cwd=run_dir, env={**os.environ, **(env or {})})
    write_pid_file(run_dir / FRONT_PID_FILE, child.owned)
    return child.pid


def wait_front_ready(config: FrontConfig, run_dir: Path, timeout: float = 60) -> None:
    """Until the front's /v2/health/ready says 200, or its process is gone."""
    url = front_urls(config)[0] + "/v2/health/ready"
    tls = verifying(config.tls.cert_file if config.tls else None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = front_pid(run_dir)
        if pid is None or reap(pid):
            raise UsageError(f"the Open Inference Protocol front exited during start-up; see {Path(run_dir) / 'logs' / FRONT_LOG}:\n"
                             f"{_log_tail(run_dir)}")
        if _status(url, tls) == 200:
            return
        time.sleep(0.5)
    raise UsageError(f"the Open Inference Protocol front was not ready after {timeout:.0f} s; see {Path(run_dir) / 'logs' / FRONT_LOG}")


def front_pid(run_dir: Path) -> int | None:
    """The front's pid while it is still the process we started, else None."""
    recorded = read_pid_file(Path(run_dir) / FRONT_PID_FILE)
    return recorded[0].pid if recorded is not None and recorded[0].leader_is_ours() else None


def stop_front(run_dir: Path, timeout: float = 15) -> None:
    """SIGTERM the front's session; SIGKILL it only if it is still ours after `timeout`."""
    recorded = read_pid_file(Path(run_dir) / FRONT_PID_FILE)
    if recorded is not None and recorded[0].leader_is_ours():
        stop_group(recorded[0], timeout)
    (Path(run_dir) / FRONT_PID_FILE).unlink(missing_ok=True)


def _host(address: str) -> str:
    if address in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{address}]" if ":" in address else address


def _status(url: str, tls: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5, context=tls) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError) as err:
        raise_if_unverified(url, err)
        return 0


def _log_tail(run_dir: Path, lines: int = 25) -> str:
    try:
        return "\n".join((Path(run_dir) / "logs" / FRONT_LOG).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def front_urls(config: FrontConfig) -> tuple[str, str]:
    """The REST base URL (https where the front serves it) and the gRPC target clients on this machine use."""
    host = _host(config.address)
    return f"{'https' if config.rest_tls else 'http'}://{host}:{config.rest_port}", f"{host}:{config.grpc_port}"
