"""A container's probes, run as the kubelet runs them: the exact exec command or HTTP GET the chart wrote.

podman 4 does not run startup or readiness probes itself, so kube-check does: an exec probe runs
in the container (`podman exec`), an httpGet probe is sent from outside the pod to its address, a
named port resolved from the container's ports. Polled every second to time when each goes green.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from ...errors import UsageError
from .pod import Pod

POLL_S = 1.0
CRASH_LOG_LINES = 15


@dataclass(frozen=True)
class ProbeResult:
    container: str
    kind: str  # startupProbe or readinessProbe
    ok: bool
    seconds: float  # from the start of waiting until green (or until given up)
    detail: str


def port_number(container: dict, port) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    for entry in container.get("ports", []):
        if entry.get("name") == port:
            return int(entry["containerPort"])
    raise UsageError(f"container {container['name']} has no port named {port!r}")


def probe_once(pod: Pod, address: str, container: dict, probe: dict) -> tuple[bool, str]:
    """One try of a probe; (green, what it said)."""
    timeout = probe.get("timeoutSeconds", 1)
    if "exec" in probe:
        result = pod.exec(container["name"], probe["exec"]["command"], timeout=timeout + 30)
        return result.returncode == 0, (result.stdout + result.stderr).strip()[-200:]
    if "httpGet" in probe:
        get = probe["httpGet"]
        url = f"http://{address}:{port_number(container, get['port'])}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= response.status < 400, f"GET {url}: {response.status}"
        except urllib.error.HTTPError as err:
            return False, f"GET {url}: {err.code}"
        except OSError as err:
            return False, f"GET {url}: {err}"
    raise UsageError(f"container {container['name']}: probe kind not run here: {sorted(probe)}")


def crashed(pod: Pod, container: str) -> str | None:
    """Why the container is no longer the one that was started (it exited, or podman restarted it), else None.

    A crash-looping container never turns green, and its probe would otherwise be polled until the whole
    startup allowance (minutes) had passed; its exit code and last lines tell the user at once what broke."""
    record = pod.inspect(container)
    state = record.get("State", {})
    restarts = record.get("RestartCount", 0)
    if state.get("Status") == "running" and not restarts:
        return None
    return (f"container {container} {state.get('Status', 'gone')} (exit code {state.get('ExitCode')}, "
            f"restarted {restarts} time(s)); its last lines:\n{pod.logs(container, lines=CRASH_LOG_LINES)}")


def wait_green(pod: Pod, address: str, container: dict, kind: str, started: float) -> ProbeResult:
    """Poll one probe until it succeeds, its container crashes, or periodSeconds x failureThreshold have passed."""
    probe = container[kind]
    limit = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3) + probe.get("initialDelaySeconds", 0)
    deadline = time.monotonic() + limit
    detail = "not tried"
    while time.monotonic() < deadline:
        ok, detail = probe_once(pod, address, container, probe)
        if ok:
            return ProbeResult(container["name"], kind, True, round(time.monotonic() - started, 1), detail)
        crash = crashed(pod, container["name"])
        if crash:
            return ProbeResult(container["name"], kind, False, round(time.monotonic() - started, 1), crash)
        time.sleep(POLL_S)
    return ProbeResult(container["name"], kind, False, round(time.monotonic() - started, 1),
                       f"not green after {limit} s: {detail}")


def wait_ready(pod: Pod, address: str, containers: list[dict], started: float) -> list[ProbeResult]:
    """Every container's startup probe, then its readiness probe, as the kubelet orders them."""
    results = []
    for kind in ("startupProbe", "readinessProbe"):
        for container in containers:
            if kind in container:
                result = wait_green(pod, address, container, kind, started)
                results.append(result)
                if not result.ok:
                    return results
    return results
