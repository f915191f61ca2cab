"""A started server as its clients and its stopper see it, whichever engine it is: the run directory, the config it
serves, the pid of its process session and that session's start time.

Every engine's run is found the same way (a pid file in the run directory whose pid is trusted only while it is still
the process that was started: tools/processes.py), answers at the addresses its config binds, with the keys its run
directory holds, and tells its health on `/ping`. What differs (how it starts, when it is ready, how it drains and
stops, what its processes are called) each engine's run says itself (tools/engines/torchserve/server.py,
tools/engines/kserve/engine_process.py).
"""

from __future__ import annotations

import functools
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from tsvk.common import read_properties

from ...errors import UsageError
from ...keys import KEY_TYPES, read_key_file
from ...processes import Owned, group_alive, recorded_if_ours
from ...tls import client_context, raise_if_unverified

# TorchServe 0.12 writes key_file.json into its working directory with the process's umask and only then
# narrows it to 0600 (TokenAuthorization.generateKeyFile): a run dir is owner-only and every engine starts
# with this umask, so the keys, logs and unpacked archives are never readable by other users, not even briefly.
PRIVATE_UMASK = 0o077
# Where each API answers when the config does not say: TorchServe's own defaults, which the engine keeps.
DEFAULT_URLS = {"inference": "http://127.0.0.1:8080", "management": "http://127.0.0.1:8081", "metrics": "http://127.0.0.1:8082"}


@dataclass
class ServerRun:
    run_dir: Path
    config: Path
    pid: int
    process: subprocess.Popen | None = field(default=None, repr=False)  # set when started by this process
    started_at: float | None = None  # the leader's start time (psutil), which a reused pid cannot match
    stdout_offset: int = 0  # where this start's output begins in its console log (earlier runs append there too)
    engine: ClassVar[str]  # the engine's name (tools/engines/registry.py)
    markers: ClassVar[tuple[str, ...]]  # command-line words of the processes that may remain in its session
    console_log: ClassVar[str]  # under logs/: the server's console output, where a failed start says why
    pid_file: ClassVar[str]  # in the run directory: the session leader's pid, its start time and the config

    @property
    def properties(self) -> dict[str, str]:
        return read_properties(self.config)

    def url(self, api: str) -> str:
        """Base URL of the inference, management or metrics API, as the config binds it."""
        address = self.properties.get(f"{api}_address", DEFAULT_URLS[api])
        return address.replace("://0.0.0.0:", "://127.0.0.1:")

    @functools.cached_property
    def client_tls(self) -> ssl.SSLContext:
        """What tsvk's clients verify this run's https addresses with (tools/tls.py): the system's authorities and the
        config's certificate_file."""
        return client_context(self.properties)

    def keys(self) -> dict[str, str]:
        """The token-auth keys ({'inference': ..., 'management': ...}); empty when auth is off, and while the server
        is still writing the file (a wait for readiness then simply polls again)."""
        raw = read_key_file(self.run_dir)
        return {api: raw[api]["key"] for api in KEY_TYPES if isinstance(raw.get(api), dict) and "key" in raw[api]}

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

    def session_alive(self) -> bool:
        if self.process is not None:
            self.process.poll()  # reap our own child so it does not linger as a zombie
        return group_alive(self.pid)

    @property
    def owned_process(self) -> Owned:
        return Owned(self.pid, self.started_at, self.markers)

    def owned(self) -> bool:
        """True while process group `pid` is still the one we started (see `processes.group_is_ours`)."""
        return self.owned_process.group_is_ours()

    def stdout_since_start(self) -> str:
        try:
            with open(self.run_dir / "logs" / self.console_log, "rb") as out:
                out.seek(self.stdout_offset)
                return out.read().decode(errors="replace")
        except OSError:
            return ""


Run = TypeVar("Run", bound=ServerRun)


def find_run(run_type: type[Run], run_dir: Path) -> Run | None:
    """The run of `run_type`'s engine started from `run_dir`, if its pid file names a process group still ours (none, or
    stale: that pid is gone or belongs to someone else now)."""
    recorded = recorded_if_ours(Path(run_dir) / run_type.pid_file, notes=1, markers=run_type.markers)
    if recorded is None:
        return None
    owned, (config,) = recorded
    return run_type(Path(run_dir).resolve(), Path(config), owned.pid, started_at=owned.started_at)


def checked_start(run_type: type[ServerRun], config: Path, run_dir: Path, label: str) -> tuple[Path, Path]:
    """`config` and `run_dir` made absolute, once the config exists and no run of this engine is live in the run dir."""
    config, run_dir = Path(config).resolve(), Path(run_dir).resolve()
    if not config.is_file():
        raise UsageError(f"config {config} not found; generate it with `tsvk config`")
    running = find_run(run_type, run_dir)
    if running is not None:
        raise UsageError(f"{label} started from {run_dir} is already running (pid {running.pid}); `tsvk stop` first")
    return config, run_dir


def make_private_dir(path: Path) -> None:
    """Create `path` (and parents) with its last part readable by its owner only; an existing one of ours
    is narrowed to that (one of another user's is left alone: the server then fails on it, saying so)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.getuid():
        path.chmod(0o700)


def get(url: str, headers: dict[str, str], tls: ssl.SSLContext, timeout: float = 5) -> tuple[int, str]:
    """(status, body); (0, "") while nothing answers. A certificate that does not verify is no passing state: refused."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        raise_if_unverified(url, err)
        return 0, ""


def ping_ok(run: ServerRun) -> bool:
    status, body = get(run.url("inference") + "/ping", run.headers("inference"), run.client_tls)  # token auth covers /ping too
    return status == 200 and '"Healthy"' in body
