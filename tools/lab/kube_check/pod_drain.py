"""Stopping a pod under load: every request it accepted is answered, and it exits within its drain
timeout + 5 s.

The pod is stopped as the kubelet stops it, SIGTERM to each container's PID 1 and SIGKILL after
terminationGracePeriodSeconds, while an open loop keeps sending at a fraction of the pod's capacity.
podman runs no preStop hook and removes no Service endpoint, so requests keep arriving during the
drain. A request the pod refuses to connect was never accepted, nor was one answered 503
`server_stopping` (a worker sent it back unread once the stop had answered everything taken in:
tools/engines/torchserve/drain.py); one it connected and then dropped (or answered with another error status) is lost.
"""

from __future__ import annotations

import re
import time
from collections import Counter

from .chart import Rendered
from .load import OpenLoop, Sent
from .pod import Pod

EXIT_MARGIN_S = 5
WARMUP_S = 10
AFTER_EXIT_S = 2
DRAIN_NAME = re.compile(r"drain", re.IGNORECASE)
MISSING_ENTRYPOINT = ("the chart's torchserve container names no drain timeout (an environment variable or "
                      "argument with 'drain' in its name), and its PID 1 is {pid1!r}: the torchserve launcher does "
                      "not handle SIGTERM, so a stop kills requests in flight. Requests are answered through a stop "
                      "only once the image's draining entrypoint is PID 1 (k8s/README.md, 'Rollouts').")


def drain_timeout_s(container: dict) -> int | None:
    """The drain timeout the rendered container gives its entrypoint: an env var or a --*drain* argument."""
    for env in container.get("env", []):
        if DRAIN_NAME.search(env.get("name", "")) and str(env.get("value", "")).isdigit():
            return int(env["value"])
    argv = [str(a) for a in container.get("command", []) + container.get("args", [])]
    for i, arg in enumerate(argv):
        if DRAIN_NAME.search(arg):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                return int(value)
    return None


def pid1(pod: Pod, container: str) -> str:
    result = pod.exec(container, ["cat", "/proc/1/cmdline"])
    return result.stdout.replace("\0", " ").strip() or f"unknown ({result.stderr.strip()[:80]})"


def measure(pod: Pod, rendered: Rendered, url: str, photo: bytes, rate: float) -> dict:
    """Stop the pod under an open loop at `rate` requests/s; what became of every request, and how long it took."""
    server = rendered.container(rendered.server_name)
    grace = int(rendered.pod_spec.get("terminationGracePeriodSeconds", 30))
    timeout = drain_timeout_s(server)
    first = pid1(pod, rendered.server_name)
    loop = OpenLoop(url, photo, rate).start()
    time.sleep(WARMUP_S)
    sigterm_at = time.monotonic()
    exit_s = pod.stop(grace)
    time.sleep(AFTER_EXIT_S)
    records = loop.stop()
    states = {name: pod.state(name) for name in pod.containers}
    said = pod.logs(rendered.server_name, lines=2).splitlines()  # the entrypoint's last words: how its drain went
    return {**summarize(records, sigterm_at, exit_s, timeout, grace, rate, first, states), "entrypoint_said": said[-1:]}


def is_lost(record: Sent) -> bool:
    """Connected and never answered, or an error status other than the stop's refusal (load.py sorts those out)."""
    return record.outcome in ("lost", "failed")


def summarize(records: list[Sent], sigterm_at: float, exit_s: float, timeout: int | None, grace: int, rate: float,
              first: str, states: dict[str, dict]) -> dict:
    before = Counter(r.outcome for r in records if r.started < sigterm_at)
    after = Counter(r.outcome for r in records if r.started >= sigterm_at)
    lost = [r for r in records if is_lost(r)]
    bound = (timeout if timeout is not None else grace) + EXIT_MARGIN_S
    killed = {name: s.get("ExitCode") for name, s in states.items() if s.get("ExitCode") == 137}
    ok = timeout is not None and not lost and exit_s <= bound and not killed
    problems = []
    if timeout is None:
        problems.append(MISSING_ENTRYPOINT.format(pid1=first))
    if lost:
        problems.append(f"{len(lost)} accepted request(s) not answered, e.g. {lost[0].status} {lost[0].error[:120]!r}")
    if exit_s > bound:
        problems.append(f"the pod took {exit_s:.1f} s to exit, over the drain timeout + {EXIT_MARGIN_S} s ({bound} s)")
    if killed:
        problems.append(f"SIGKILLed after the grace period: {sorted(killed)}")
    return {
        "ok": ok,
        "problems": problems,
        "rate_rps": round(rate, 2),
        "pid1": first,
        "drain_timeout_s": timeout,
        "termination_grace_period_s": grace,
        "exit_s": round(exit_s, 2),
        "exit_codes": {name: s.get("ExitCode") for name, s in states.items()},
        "sent_before_sigterm": dict(before),
        "sent_after_sigterm": dict(after),
        "refused_with_503_server_stopping": sum(1 for r in records if r.outcome == "refused" and r.status == 503),
        "lost_examples": [r.error for r in lost[:3]],
    }
