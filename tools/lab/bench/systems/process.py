"""What the benchmark's servers share: waiting for one to be ready, and an environment without thread settings.
Starting and stopping them is tools/processes.py's (`start_detached`, `Child.stop`)."""

from __future__ import annotations

import os
import time

import requests

from ....errors import UsageError
from ....processes import Child


def wait_until(ready, server: Child, timeout: float, what: str, poll_s: float = 0.2) -> None:
    """Poll `ready()` until it is true; fail early (with the server's log) if the server died."""
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
