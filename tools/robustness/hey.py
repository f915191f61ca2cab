"""A burst through `hey` (rakyll/hey, Debian package `hey`): an established Go load generator whose
per-request CSV (`-o csv`) gives each answer's status and time, so the refused requests' latency is
measured by a client that is not itself the bottleneck (400 Python threads on 2 cores would be)."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import UsageError
from ..keys import current_key
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
        done = subprocess.run([*command, target.url], capture_output=True, text=True, timeout=timeout_s + 60)
    if done.returncode != 0:
        raise UsageError(f"hey failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return parse_csv(done.stdout)


def parse_csv(text: str) -> list[Answer]:
    """hey's CSV: response-time (s), ..., status-code, offset; requests that got no answer are absent."""
    rows = csv.DictReader(io.StringIO(text))
    return [Answer(int(row["status-code"]), float(row["response-time"]), None, "hey") for row in rows if row.get("status-code")]
