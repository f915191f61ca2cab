"""Start, wait for, and stop a TorchServe of our own, leaving any other TorchServe alone.

TorchServe keeps one pid file in the system temp dir and writes key_file.json to its working
directory, so two of them collide. Each run here gets its own directory (working dir, temp dir,
logs, key file), runs in its own process session, and is stopped by killing exactly that session.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tsvk.threads import read_properties

from .errors import UsageError

PID_FILE = "torchserve.pid"
KEY_FILE = "key_file.json"


@dataclass
class TorchServeRun:
    run_dir: Path
    config: Path
    pid: int
    process: subprocess.Popen | None = field(default=None, repr=False)  # set when started by this process

    @property
    def properties(self) -> dict[str, str]:
        return read_properties(self.config)

    def url(self, api: str) -> str:
        """Base URL of the inference, management or metrics API, as the config binds it."""
        defaults = {"inference": "http://127.0.0.1:8080", "management": "http://127.0.0.1:8081", "metrics": "http://127.0.0.1:8082"}
        address = self.properties.get(f"{api}_address", defaults[api])
        return address.replace("://0.0.0.0:", "://127.0.0.1:")

    def keys(self) -> dict[str, str]:
        """TorchServe's token-auth keys ({'inference': ..., 'management': ...}); empty when auth is off,
        and while TorchServe is still writing the file at start-up (wait_ready then simply polls again)."""
        try:
            raw = json.loads((self.run_dir / KEY_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return {api: raw[api]["key"] for api in ("inference", "management") if api in raw}

    def headers(self, api: str) -> dict[str, str]:
        key = self.keys().get(api)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def wait_ready(self, models: list[str] | None = None, timeout: float = 300) -> None:
        """Until /ping is healthy and every model has all its workers READY, or the server dies."""
        models = models if models is not None else _configured_models(self.properties)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise UsageError(f"TorchServe exited during start-up; see {self.run_dir / 'logs'}:\n{self.log_tail()}")
            if _ping_ok(self) and all(_model_ready(self, m) for m in models):
                return
            time.sleep(1)
        raise UsageError(f"TorchServe not ready after {timeout:.0f} s; see {self.run_dir / 'logs'}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        logs = sorted((self.run_dir / "logs").glob("*.log"))
        text = []
        for log in logs:
            if log.name in ("model_log.log", "ts_log.log"):
                text += [f"--- {log.name}"] + log.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM our process session (frontend and workers), SIGKILL what is left after `timeout`."""
        signal_group(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.session_alive():
            time.sleep(0.5)
        signal_group(self.pid, signal.SIGKILL)
        (self.run_dir / PID_FILE).unlink(missing_ok=True)
        (self.run_dir / KEY_FILE).unlink(missing_ok=True)

    def session_alive(self) -> bool:
        if self.process is not None:
            self.process.poll()  # reap our own child so it does not linger as a zombie
        return group_alive(self.pid)


def start_torchserve(config: Path, run_dir: Path, env: dict[str, str] | None = None) -> TorchServeRun:
    """Start TorchServe in the background in its own session; refuses if this run dir has a live one."""
    config, run_dir = Path(config).resolve(), Path(run_dir).resolve()
    if not config.is_file():
        raise UsageError(f"config {config} not found; generate it with `make config`")
    running = find_running(run_dir)
    if running is not None:
        raise UsageError(f"a TorchServe started from {run_dir} is already running (pid {running.pid}); `make stop` first")
    for sub in ("tmp", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    with open(run_dir / "logs" / "stdout.log", "ab") as stdout:
        process = subprocess.Popen(
            [_torchserve_bin(), "--start", "--foreground", "--ncs", "--ts-config", str(config)],
            cwd=run_dir, env=_server_env(run_dir, env), start_new_session=True, stdout=stdout, stderr=subprocess.STDOUT,
        )
    (run_dir / PID_FILE).write_text(f"{process.pid}\n{config}\n")
    return TorchServeRun(run_dir, config, process.pid, process)


def find_running(run_dir: Path) -> TorchServeRun | None:
    pid_file = Path(run_dir) / PID_FILE
    if not pid_file.is_file():
        return None
    pid_text, config = (pid_file.read_text().splitlines() + [""])[:2]
    run = TorchServeRun(Path(run_dir).resolve(), Path(config), int(pid_text))
    if not group_alive(run.pid):
        pid_file.unlink(missing_ok=True)
        return None
    return run


def _torchserve_bin() -> str:
    local = Path(sys.executable).with_name("torchserve")
    return str(local) if local.exists() else (shutil.which("torchserve") or "torchserve")


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
    try:
        return list(json.loads(properties.get("models", "{}")))
    except ValueError:
        return []


def _get(url: str, headers: dict[str, str], timeout: float = 5) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def _ping_ok(run: TorchServeRun) -> bool:
    status, body = _get(run.url("inference") + "/ping", run.headers("inference"))  # token auth covers /ping too
    return status == 200 and '"Healthy"' in body


def _model_ready(run: TorchServeRun, model: str) -> bool:
    status, body = _get(f"{run.url('management')}/models/{model}", run.headers("management"))
    if status != 200:
        return False
    info = json.loads(body)[0]
    workers = info.get("workers", [])
    return len(workers) >= info.get("minWorkers", 1) and all(w.get("status") == "READY" for w in workers)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
