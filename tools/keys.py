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
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from .errors import UsageError
from .processes import Owned, read_pid_file, signal_if_ours, start_detached, write_pid_file
from .tls import root_certificate, verifying

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


def renew_keys(run_dir: Path, management_url: str, kinds: tuple[str, ...] = KEY_TYPES, tls: ssl.SSLContext | None = None) -> None:
    """Ask TorchServe for new keys with the API key; it rewrites the key file itself. `tls` verifies an https management
    address (TorchServeRun.client_tls: the config's certificate_file)."""
    api_key = read_key_file(run_dir).get("API", {}).get("key")
    if not api_key:
        raise UsageError(f"no API key in {Path(run_dir) / KEY_FILE}: token authorization is off or TorchServe is not running")
    for kind in kinds:
        request = urllib.request.Request(f"{management_url}/token?type={kind}", headers={"Authorization": f"Bearer {api_key}"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=tls) as response:
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
    """Start the renewer for a TorchServe run (server.TorchServeRun) with token auth on; it exits by itself
    when the run ends. Its command line says all it needs: where the keys are, whom to ask, how often,
    and which process group to outlive no longer."""
    if run.properties.get("disable_token_authorization", "false").lower() == "true":
        return None
    watched = run.owned_process
    certificate = root_certificate(run.properties)
    command = [sys.executable, "-m", "tsvk_tools.keys", "--run-dir", str(run.run_dir), "--management-url", run.url("management"),
               "--period-s", str(renewal_period_s(run.properties)), "--watch-pid", str(watched.pid),
               "--watch-started-at", str(watched.started_at or 0), *[f"--watch-marker={m}" for m in watched.markers],
               *(["--certificate-file", str(certificate)] if certificate else [])]
    child = start_detached(command, run.run_dir / "logs" / "key-renewer.log", cwd=run.run_dir)
    write_pid_file(run.run_dir / RENEWER_PID_FILE, child.owned)
    return child.process


def stop_key_renewer(run_dir: Path) -> None:
    """SIGTERM the renewer recorded in `run_dir`, only if that pid is still the renewer we started."""
    pid_file = Path(run_dir) / RENEWER_PID_FILE
    recorded = read_pid_file(pid_file)
    if recorded is None:
        return
    signal_if_ours(recorded[0], signal.SIGTERM)
    pid_file.unlink(missing_ok=True)


def renew_while_running(run_dir: Path, management_url: str, period: float, watched: Owned,
                        tls: ssl.SSLContext | None = None) -> int:
    """The renewer's loop: renew every `period` s until the watched TorchServe is gone."""
    next_renewal = time.monotonic() + period
    while watched.group_is_ours():
        if time.monotonic() >= next_renewal:
            next_renewal = time.monotonic() + _renew_logged(run_dir, management_url, period, tls)
        time.sleep(min(1.0, period / 4))
    return 0


def _renew_logged(run_dir: Path, management_url: str, period: float, tls: ssl.SSLContext | None) -> float:
    """Renew once; seconds until the next try (sooner after a failure)."""
    try:
        renew_keys(run_dir, management_url, tls=tls)
    except UsageError as err:
        print(f"{time.strftime('%H:%M:%S')} key renewal failed, retrying in 2 s: {err}", flush=True)
        return 2.0
    print(f"{time.strftime('%H:%M:%S')} renewed {', '.join(KEY_TYPES)} keys; next in {period:.0f} s", flush=True)
    return period


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.keys", description="renew TorchServe's keys while it runs")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--management-url", required=True)
    parser.add_argument("--period-s", type=float, required=True)
    parser.add_argument("--watch-pid", type=int, required=True)
    parser.add_argument("--watch-started-at", type=float, required=True)
    parser.add_argument("--watch-marker", action="append", default=[])
    parser.add_argument("--certificate-file", type=Path, help="an https management address: the config's certificate_file, trusted")
    args = parser.parse_args(argv)
    watched = Owned(args.watch_pid, args.watch_started_at, tuple(args.watch_marker))
    return renew_while_running(args.run_dir, args.management_url, args.period_s, watched, verifying(args.certificate_file))


if __name__ == "__main__":
    sys.exit(main())
