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
from tsvk.common import read_properties

from ...keys import current_key, is_key_refusal, stop_key_renewer
from ...oip.config import is_oip_config, read_front_config
from ...oip.process import front_pid, front_urls
from ...engines.registry import engine_of
from ...processes import net_connections
from . import checks, watch
from .checks import judged
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
    ports = private_ports(service)
    listening = listening_addresses(service.run, ports)
    probes = probe_from_outside(ports)
    return {
        "no_key": {"status": no_key.status, "type": no_key.error},
        "wrong_key": {"status": wrong[0], "type": wrong[1]},
        "register_from_url": {"status": registration[0], "body": registration[1][:200]},
        "canary_connections": canary.connections,
        "private_ports": ports,
        "listening": {str(p): a for p, a in listening.items()},
        "outside_addresses": sorted({p.host for p in probes}),
        "reachable_from_outside": [f"{p.host}:{p.port}" for p in probes if p.connected],
        **judged(
            {
                "no key refused": checks.invalid_key_refusal(no_key.status, no_key.error, "no key"),
                "wrong key refused": checks.invalid_key_refusal(wrong[0], wrong[1], "a wrong key"),
                "registration from a URL refused": checks.refused(registration[0], "registration from a URL"),
                "canary saw 0 connections": checks.below(canary.connections if registration[0] else None, 1, "connections to the canary"),
                "management, metrics, gRPC and OIP not on outside addresses": checks.not_exposed(listening, probes, ports.values()),
            }
        ),
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
        "expiry_s": expiry_s,
        "requests": len(results),
        "statuses": statuses,
        "keys_seen": renewals,
        "stale_key": {"status": stale_status[0], "type": stale_status[1]},
        "unrenewed_key_after_expiry": {"status": lapsed[0], "type": lapsed[1]},
        **judged(
            {
                f"all 200 across {cycles} expiries": checks.all_status(results, 200, "requests following the key procedure"),
                "keys were renewed": checks.at_least(renewals, cycles + 1, "keys seen"),
                "stale key refused": checks.key_refused(stale, stale_status[1], "the first key, after it was renewed"),
                "an unrenewed key lapses": checks.key_refused(last, lapsed[1], "the last key, unrenewed past its expiry"),
            }
        ),
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
    """TorchServe's registration call on its management API; tsvk's engine has none, so it is asked of the one HTTP API
    it opens (its inference address), with that address's key, where it must be refused too."""
    api = "management" if engine_of(service.run).management_api else "inference"
    request = urllib.request.Request(f"{service.run.url(api)}/models?url={url}", method="POST", headers=service.run.headers(api))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError as err:  # no answer at all: the check fails for want of one
        return 0, str(err)


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


def private_ports(service: Service) -> dict[str, int]:
    """The ports that must answer only on this host: management, metrics, both gRPC APIs, and the OIP
    front's REST and gRPC ports when it runs (inference too where its address is loopback). An engine without a
    management API (tsvk's) opens fewer: metrics, its Open Inference Protocol gRPC port and the inference address
    (which serves OIP REST too)."""
    if not engine_of(service.run).management_api:
        return _engine_ports(service)
    config = read_properties(service.run.config)
    ports = {api: urlsplit(service.run.url(api)).port for api in ("management", "metrics")}
    for key in ("grpc_inference_port", "grpc_management_port"):
        if config.get(key, "").isdigit():
            ports[key] = int(config[key])
    if _loopback_host(urlsplit(service.run.url("inference")).hostname):
        ports["inference"] = urlsplit(service.run.url("inference")).port
    if is_oip_config(config):
        rest, grpc = front_urls(read_front_config(service.run.config))
        ports["oip_rest"], ports["oip_grpc"] = urlsplit(rest).port, int(grpc.rsplit(":", 1)[1])
    return ports


def _engine_ports(service: Service) -> dict[str, int]:
    ports = {"metrics": urlsplit(service.run.url("metrics")).port}
    if _loopback_host(urlsplit(service.run.url("inference")).hostname):
        ports["inference"] = urlsplit(service.run.url("inference")).port
    if is_oip_config(read_properties(service.run.config)):
        ports["oip_grpc"] = int(service.run.oip_urls()[1].rsplit(":", 1)[1])
    return ports


def _loopback_host(host: str | None) -> bool:
    return bool(host) and (host.startswith("127.") or host in ("localhost", "::1"))


def listening_addresses(run, ports: dict[str, int]) -> dict[int, list[str]]:
    """Port -> the local addresses our processes (TorchServe's tree and the OIP front) listen on."""
    wanted, found = set(ports.values()), {}
    for process in [*watch.tree(run), *front_processes(run)]:
        try:
            connections = net_connections(process, "inet")
        except psutil.Error:
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in wanted:
                found.setdefault(conn.laddr.port, []).append(conn.laddr.ip)
    return {port: sorted(set(addresses)) for port, addresses in found.items()}


def front_processes(run) -> list[psutil.Process]:
    pid = front_pid(run.run_dir)
    try:
        return [psutil.Process(pid)] if pid else []
    except psutil.Error:
        return []


def outside_addresses() -> list[str]:
    """Every non-loopback IPv4 and IPv6 address of this host (link-local ones with their interface)."""
    found = []
    for nic, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                found.append(a.address)
            elif a.family == socket.AF_INET6 and a.address != "::1":
                found.append(a.address if "%" in a.address or not a.address.startswith("fe80") else f"{a.address}%{nic}")
    return found


def probe_from_outside(ports: dict[str, int]) -> list[checks.Probe]:
    """A connection attempt to each port on each outside address."""
    return [checks.Probe(host, port, _connects(host, port)) for host in outside_addresses() for port in sorted(set(ports.values()))]


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False
