"""Auth and network surface: keys refused when missing, wrong or stale; keys that never lapse for a
client following the documented procedure; no model registration from a URL; management and
metrics unreachable from outside the host."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit

import psutil

from ..keys import current_key, is_key_refusal, start_key_renewer, stop_key_renewer
from .client import send
from .parts import Service


def surface(service: Service) -> dict:
    """Missing / wrong key, registration from a URL (a canary server counts connections), and the
    management and metrics ports probed on every non-loopback address of this machine."""
    no_key = send(service.target, service.photo, key_procedure=False)
    wrong = _post_with_key(service, "not-the-key")
    with _canary() as canary:
        registration = _register_from_url(service, f"http://127.0.0.1:{canary.port}/evil.mar")
        time.sleep(0.5)
    exposed = _reachable_from_outside(service)
    return {
        "no_key": {"status": no_key.status, "type": no_key.error}, "wrong_key": {"status": wrong[0], "type": wrong[1]},
        "register_from_url": {"status": registration[0], "body": registration[1][:200]}, "canary_connections": canary.connections,
        "non_loopback_addresses": exposed["addresses"], "reachable_from_outside": exposed["reachable"],
        "checks": {
            "no key refused": no_key.status in (400, 401) and no_key.error == "InvalidKeyException",
            "wrong key refused": wrong[0] in (400, 401) and wrong[1] == "InvalidKeyException",
            "registration from a URL refused": registration[0] >= 400, "canary saw 0 connections": canary.connections == 0,
            "management and metrics not on outside addresses": not exposed["reachable"],
        },
    }


def key_lifetime(service: Service, expiry_s: float, cycles: int = 3) -> dict:
    """With keys expiring every `expiry_s` and the renewer running, a client following the documented
    procedure gets 200 for `cycles` expiries; a stale key and no key are refused; with the renewer
    stopped, the last key lapses after `expiry_s`."""
    stale = current_key(service.run.run_dir)
    results, renewals = _follow_procedure(service, duration_s=cycles * expiry_s)
    stale_status = _post_with_key(service, stale)
    stop_key_renewer(service.run.run_dir)
    last = current_key(service.run.run_dir)
    time.sleep(expiry_s + 1.0)
    lapsed = _post_with_key(service, last)
    statuses = {str(s): results.count(s) for s in sorted(set(results))}
    return {
        "expiry_s": expiry_s, "requests": len(results), "statuses": statuses, "keys_seen": renewals,
        "stale_key": {"status": stale_status[0], "type": stale_status[1]},
        "unrenewed_key_after_expiry": {"status": lapsed[0], "type": lapsed[1]},
        "checks": {
            f"all 200 across {cycles} expiries": bool(results) and set(results) == {200},
            "keys were renewed": renewals > cycles, "stale key refused": stale_status[1] == "InvalidKeyException",
            "an unrenewed key lapses": lapsed[1] == "InvalidKeyException",
        },
    }


def _follow_procedure(service: Service, duration_s: float) -> tuple[list[int], int]:
    statuses, keys = [], set()
    ends = time.monotonic() + duration_s
    while time.monotonic() < ends:
        statuses.append(send(service.target, service.photo).status)
        keys.add(current_key(service.run.run_dir))
        time.sleep(0.2)
    return statuses, len(keys - {None})


def _post_with_key(service: Service, key: str | None) -> tuple[int, str | None]:
    headers = {"Content-Type": "application/octet-stream", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(service.target.url, data=service.photo, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, None
    except urllib.error.HTTPError as err:
        body = err.read()
        return err.code, "InvalidKeyException" if is_key_refusal(err.code, body) else body.decode(errors="replace")[:80]


def _register_from_url(service: Service, url: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{service.run.url('management')}/models?url={url}", method="POST",
                                     headers=service.run.headers("management"))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


class _Canary:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stopped = threading.Event()

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()


@contextmanager
def _canary() -> Iterator[_Canary]:
    """A local TCP server that only counts who connects to it."""
    canary = _Canary()
    thread = threading.Thread(target=canary.serve, daemon=True)
    thread.start()
    try:
        yield canary
    finally:
        canary.stopped.set()
        thread.join()
        canary.sock.close()


def _reachable_from_outside(service: Service) -> dict:
    """Connect to the management and metrics ports on each non-loopback IPv4 address of this host."""
    addresses = [a.address for nics in psutil.net_if_addrs().values() for a in nics
                 if a.family == socket.AF_INET and not a.address.startswith("127.")]
    ports = [urlsplit(service.run.url(api)).port for api in ("management", "metrics")]
    reachable = [f"{host}:{port}" for host in addresses for port in ports if _connects(host, port)]
    return {"addresses": addresses, "reachable": reachable}


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def restart_renewer(service: Service) -> None:
    """Used after `key_lifetime` stopped the renewer, so later parts keep working."""
    start_key_renewer(service.run)
