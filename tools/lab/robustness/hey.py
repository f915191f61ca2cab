"""A burst through `hey` (rakyll/hey, Debian package `hey`): an established Go load generator whose
per-request CSV (`-o csv`) gives each answer's status and time, so the refused requests' latency is
measured by a client that is not itself the bottleneck (400 Python threads on 2 cores would be).

hey takes headers only on its command line, where any local user sees them (`ps`). So the inference key
it is given is replaced through TorchServe's token API as soon as the burst ends, whatever its outcome:
the key that was visible is dead before anyone could use it for more than the burst's few seconds.
(hey cannot read headers from a file or the environment; a proxy adding the header would be a second
client in the measured path.) tsvk's own engine has no token API: its keys last until it stops, which the
robustness run does when its parts are done; the burst's key is said to be left live until then.)"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ...errors import UsageError
from ...keys import current_key, renew_keys
from ...engines.kserve.engine_process import find_engine
from ...engines.torchserve.server import find_running
from .client import Answer, Target


def require_hey() -> str:
    found = shutil.which("hey")
    if not found:
        raise UsageError("the overload part needs the load generator hey: apt-get install -y hey")
    return found


def burst(target: Target, body: bytes, requests: int, timeout_s: int = 120) -> list[Answer]:
    """`requests` POSTs, all concurrent; one Answer per request (source/error unknown to hey: None)."""
    hey = require_hey()
    key = current_key(target.run_dir)
    with tempfile.NamedTemporaryFile(suffix=".jpg") as payload:
        Path(payload.name).write_bytes(body)
        command = [hey, "-n", str(requests), "-c", str(requests), "-m", "POST", "-D", payload.name, "-T", "application/octet-stream",
                   "-t", str(timeout_s), "-o", "csv", "-H", f"X-Request-Start: t={time.time():.6f}"]
        if key:
            command += ["-H", f"Authorization: Bearer {key}"]
        try:
            done = subprocess.run([*command, target.url], capture_output=True, text=True, timeout=timeout_s + 60)
        finally:
            if key:
                retire_inference_key(target.run_dir)
    if done.returncode != 0:
        raise UsageError(f"hey failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return parse_csv(done.stdout)


def retire_inference_key(run_dir: Path) -> None:
    """Replace the inference key now (the management API's /token), so one seen on a command line is dead."""
    if find_engine(run_dir) is not None:
        print(f"robustness: the engine started from {run_dir} cannot replace its keys; the key hey was given lives until "
              "the engine stops", flush=True)
        return
    run = find_running(run_dir)
    if run is None:
        raise UsageError(f"no TorchServe started from {run_dir} is running: the inference key hey was given cannot be replaced")
    renew_keys(run.run_dir, run.url("management"), kinds=("inference",))


def parse_csv(text: str) -> list[Answer]:
    """hey's CSV: response-time (s), ..., status-code, offset; requests that got no answer are absent."""
    rows = csv.DictReader(io.StringIO(text))
    return [Answer(int(row["status-code"]), float(row["response-time"]), None, "hey") for row in rows if row.get("status-code")]
