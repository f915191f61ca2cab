"""Token-auth keys that a client can always find and that never lapse while the server runs.

TorchServe 0.12 writes `key_file.json` into its working directory at start: an inference key, a
management key (both expire after `token_expiration_min`, 60 by default) and an API key (never
expires) that is only good for its `/token?type=...` endpoint on the management address, which
replaces one key and rewrites the file. Past the expiry, every call with the old key, /ping
included, is refused with 400 `InvalidKeyException`.

So `tsvk serve` starts a renewer next to TorchServe that replaces both keys at half their lifetime,
and clients follow one rule: on a 400 whose body has `"type": "InvalidKeyException"` (TorchServe's,
never a tsvk error: ours carry an `error` field), read the key file again and retry. `tsvk keys`
prints the current inference key; `tsvk keys --renew` replaces the keys now.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from . import defaults
from .errors import UsageError

KEY_FILE = "key_file.json"
RENEWER_PID_FILE = "key-renewer.pid"
KEY_TYPES = ("inference", "management")
DEFAULT_EXPIRY_MIN = 60.0  # TorchServe's own default when token_expiration_min is absent
REFUSED_KEY_TYPE = "InvalidKeyException"  # the `type` of TorchServe's body when a key is refused
RETRY_PAUSE_S = 0.2


def read_key_file(run_dir: Path) -> dict:
    """The key file as TorchServe wrote it; {} while it is missing or half-written."""
    try:
        return json.loads((Path(run_dir) / KEY_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def current_key(run_dir: Path, kind: str = "inference") -> str | None:
    return read_key_file(run_dir).get(kind, {}).get("key")


def is_key_refusal(status: int, body: bytes | str) -> bool:
    """TorchServe refusing the key (expired, replaced, wrong or missing), as opposed to any other 400."""
    text = body.decode(errors="replace") if isinstance(body, (bytes, bytearray)) else body
    return status in (400, 401) and REFUSED_KEY_TYPE in text


def call_with_fresh_key(send: Callable[[dict[str, str]], tuple[int, bytes]], run_dir: Path, kind: str = "inference",
                        attempts: int = 5) -> tuple[int, bytes]:
    """The documented client procedure: send with the key on file; when TorchServe refuses the key,
    read the file again (it may be mid-rewrite) and resend, a few times."""
    status, body = 0, b""
    for attempt in range(attempts):
        key = current_key(run_dir, kind)
        status, body = send({"Authorization": f"Bearer {key}"} if key else {})
        if not is_key_refusal(status, body):
            return status, body
        time.sleep(RETRY_PAUSE_S * (attempt + 1))
    return status, body


def renew_keys(run_dir: Path, management_url: str, kinds: tuple[str, ...] = KEY_TYPES) -> None:
    """Ask TorchServe for new keys with the API key; it rewrites the key file itself."""
    api_key = read_key_file(run_dir).get("API", {}).get("key")
    if not api_key:
        raise UsageError(f"no API key in {Path(run_dir) / KEY_FILE}: token authorization is off or TorchServe is not running")
    for kind in kinds:
        request = urllib.request.Request(f"{management_url}/token?type={kind}", headers={"Authorization": f"Bearer {api_key}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        except (urllib.error.URLError, OSError) as err:
            raise UsageError(f"TorchServe refused to renew the {kind} key at {management_url}: {err}") from err


def renewal_period_s(properties: dict[str, str]) -> float:
    """Half the keys' lifetime, so a key is replaced well before it lapses."""
    try:
        minutes = float(properties.get("token_expiration_min", DEFAULT_EXPIRY_MIN))
    except ValueError:
        minutes = DEFAULT_EXPIRY_MIN
    return max(1.0, minutes * 60 / 2)


def start_key_renewer(run) -> subprocess.Popen | None:
    """Start the renewer for a TorchServe run with token auth on; it exits by itself when the run ends."""
    if run.properties.get("disable_token_authorization", "false").lower() == "true":
        return None
    command = [sys.executable, "-m", "tsvk_tools.keys", "--run-dir", str(run.run_dir), "--watch-pid", str(run.pid),
               "--watch-started-at", str(run.started_at or 0)]
    with open(run.run_dir / "logs" / "key-renewer.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=run.run_dir)
    from .server import process_start_time

    (run.run_dir / RENEWER_PID_FILE).write_text(f"{process.pid}\n{process_start_time(process.pid) or ''}\n")
    return process


def stop_key_renewer(run_dir: Path) -> None:
    """SIGTERM the renewer recorded in `run_dir`, only if that pid is still the renewer we started."""
    from .server import process_start_time

    pid_file = Path(run_dir) / RENEWER_PID_FILE
    try:
        pid_text, stamp = (pid_file.read_text().splitlines() + [""])[:2]
        pid, started_at = int(pid_text), float(stamp)
    except (OSError, ValueError):
        return
    current = process_start_time(pid)
    if current is not None and abs(current - started_at) < 0.05:
        os.kill(pid, signal.SIGTERM)
    pid_file.unlink(missing_ok=True)


def renew_while_running(run_dir: Path, watch_pid: int, watch_started_at: float) -> int:
    """The renewer's loop: renew at half the keys' lifetime until the watched TorchServe is gone."""
    from tsvk.properties import read_properties

    from .server import PID_FILE, TorchServeRun, group_is_ours

    pid_text, config = ((Path(run_dir) / PID_FILE).read_text().splitlines() + [""])[:2]
    run = TorchServeRun(Path(run_dir), Path(config), watch_pid, started_at=watch_started_at)
    period = renewal_period_s(read_properties(run.config))
    next_renewal = time.monotonic() + period
    while group_is_ours(watch_pid, watch_started_at):
        if time.monotonic() >= next_renewal:
            next_renewal = time.monotonic() + _renew_logged(run, period)
        time.sleep(min(1.0, period / 4))
    return 0


def _renew_logged(run, period: float) -> float:
    """Renew once; seconds until the next try (sooner after a failure)."""
    try:
        renew_keys(run.run_dir, run.url("management"))
    except UsageError as err:
        print(f"{time.strftime('%H:%M:%S')} key renewal failed, retrying in 2 s: {err}", flush=True)
        return 2.0
    print(f"{time.strftime('%H:%M:%S')} renewed {', '.join(KEY_TYPES)} keys; next in {period:.0f} s", flush=True)
    return period


def register(commands) -> None:
    p = commands.add_parser("keys", help="print the running TorchServe's inference key, or renew the keys (--renew)")
    p.add_argument("--run-dir", type=Path, default=Path(defaults.RUN_DIR))
    p.add_argument("--renew", action="store_true", help="replace the inference and management keys now")
    p.add_argument("--kind", choices=KEY_TYPES, default="inference", help="which key to print (default inference)")
    p.set_defaults(func=cmd_keys)


def cmd_keys(args: argparse.Namespace) -> int:
    from .server import find_running

    run = find_running(args.run_dir)
    if run is None:
        raise UsageError(f"no TorchServe started from {args.run_dir} is running; `tsvk serve` first")
    if args.renew:
        renew_keys(run.run_dir, run.url("management"))
    key = current_key(run.run_dir, args.kind)
    if key is None:
        raise UsageError(f"no {args.kind} key in {run.run_dir / KEY_FILE}: token authorization is off")
    print(key)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.keys", description="renew TorchServe's keys while it runs")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--watch-pid", type=int, required=True)
    parser.add_argument("--watch-started-at", type=float, required=True)
    args = parser.parse_args(argv)
    return renew_while_running(args.run_dir, args.watch_pid, args.watch_started_at)


if __name__ == "__main__":
    sys.exit(main())
