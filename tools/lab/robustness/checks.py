"""The promises `tsvk robustness` and `tsvk soak` check, one small pure function each.

Every check takes the evidence a part gathered and returns a Verdict: held or not, and why. A check
never holds for want of evidence: no answers, no worker found, a management API that did not answer, a
metric that was not scraped, an address that could not be probed: each is a failed check saying what
was missing, so a run that measured nothing cannot pass. `tests/unit/test_robustness_checks.py` feeds
every function here empty and missing evidence and asserts that it fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

MIN_INPUTS = 10_000  # a full run's corpus: inputs sent and answered
HOSTILE_WORKER_S = 1.0  # worker time a hostile input may cost beyond an ordinary request's
HOSTILE_GROWTH_MB = 100.0  # worker RSS growth a hostile input may cause
BURST_GROWTH_MB = 1536.0  # peak worker RSS growth for a burst of large but allowed photos
BOMB_HANDLER_MS = 20.0  # the handler's time on one declared-size bomb
BOMB_GROWTH_MB = 5.0  # worker RSS growth after a burst of nine bombs
DRAIN_EXIT_MARGIN_S = 5.0  # a stopped server exits within its drain timeout plus this
OVERLOAD_503_S = 1.0  # p99 of the refusals in an overload burst


@dataclass(frozen=True)
class Verdict:
    """One check's outcome and the reason, written so a reader of the report needs nothing else."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


def held(reason: str) -> Verdict:
    return Verdict(True, reason)


def failed(reason: str) -> Verdict:
    return Verdict(False, reason)


def judged(verdicts: Mapping[str, Verdict]) -> dict:
    """A part's `checks` (name -> held) and `reasons` (name -> why) for the report."""
    return {"checks": {name: v.ok for name, v in verdicts.items()}, "reasons": {name: v.reason for name, v in verdicts.items()}}


def judged_with_weaknesses(verdicts: Mapping[str, Verdict], known: Mapping[str, str]) -> dict:
    """`judged`, except a check the engine failed that it is known not to meet for a reason outside tsvk's code (`known`:
    check -> why, e.g. behind TorchServe's Java frontend): that one is listed under `weaknesses` with the reason and the
    evidence, and not counted. A known weakness the engine meets after all is judged as any other check."""
    weaknesses = {name: f"{known[name]}; measured: {v.reason}" for name, v in verdicts.items() if not v.ok and name in known}
    return {**judged({name: v for name, v in verdicts.items() if name not in weaknesses}), "weaknesses": weaknesses}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# Counting


def inputs_counted(sent: int | None, answered: int | None, minimum: int = MIN_INPUTS) -> Verdict:
    """At least `minimum` inputs were sent and each of them got an HTTP or gRPC answer (counted by the client)."""
    if not _number(sent) or not _number(answered) or sent < 1:
        return failed("no count of inputs sent and answered")
    if answered < sent:
        return failed(f"{sent - answered} of {sent} inputs got no answer")
    if sent < minimum:
        return failed(f"{sent} inputs sent and answered, fewer than {minimum}")
    return held(f"{sent} inputs sent, {answered} answered")


# Statuses


def statuses_allowed(statuses: Mapping[str, int] | None, allowed: Iterable[int]) -> Verdict:
    """Every answer's status label is one of `allowed` (0: no answer came back; "503 <type>": a 503
    other than the documented overload or deadline refusal, never allowed)."""
    allowed = sorted({str(a) for a in allowed})
    if not statuses or sum(statuses.values()) < 1:
        return failed("no answers recorded")
    outside = {s: n for s, n in statuses.items() if str(s) not in allowed}
    if outside:
        return failed(f"answers outside {allowed}: {outside}")
    return held(f"{sum(statuses.values())} answers, all in {allowed}")


def no_server_errors(statuses: Mapping[str, int] | None, allowed_5xx: Iterable[int] = ()) -> Verdict:
    """No 5xx (other than the documented `allowed_5xx`) and no request left without an answer."""
    if not statuses or sum(statuses.values()) < 1:
        return failed("no answers recorded")
    allowed = {str(a) for a in allowed_5xx}
    bad = {s: n for s, n in statuses.items() if str(s) not in allowed and (str(s).startswith("5") or str(s) == "0")}
    if bad:
        return failed(f"server errors or no answer: {bad}")
    return held(f"{sum(statuses.values())} answers, no server error")


def all_status(statuses: Sequence[int] | None, status: int, what: str) -> Verdict:
    """Every one of `statuses` (at least one) is `status`."""
    if not statuses:
        return failed(f"no {what} recorded")
    others = [s for s in statuses if s != status]
    if others:
        return failed(f"{len(others)} of {len(statuses)} {what} were not {status}: {sorted(set(others))}")
    return held(f"all {len(statuses)} {what} answered {status}")


def refused_with(answers: Sequence[tuple[int, str | None]] | None, status: int, error: str) -> Verdict:
    """Every (status, error) pair (at least one) is this refusal."""
    if not answers:
        return failed("no answers recorded")
    wrong = [a for a in answers if tuple(a) != (status, error)]
    if wrong:
        return failed(f"{len(wrong)} of {len(answers)} were not {status} {error}: {wrong[:5]}")
    return held(f"all {len(answers)} refused with {status} {error}")


# Workers


def no_worker_died(before: set[int] | None, after: set[int] | None) -> Verdict:
    """The workers' pids before and after (None: the management API did not answer) are the same."""
    if before is None or after is None:
        return failed("the management API did not list the workers")
    if not before:
        return failed("no worker was running at the start")
    gone = before - after
    if gone:
        return failed(f"{len(gone)} worker(s) died or were replaced: {sorted(gone)}")
    return held(f"the same {len(before)} worker(s) before and after")


def below(value: float | None, limit: float, what: str) -> Verdict:
    """A measured `value` (None: not measured) under `limit`."""
    if not _number(value):
        return failed(f"{what}: not measured")
    if value >= limit:
        return failed(f"{what}: {value:g}, not under {limit:g}")
    return held(f"{what}: {value:g} < {limit:g}")


def grew_under(before_mb: Mapping[str, float] | None, after_mb: Mapping[str, float] | None, limit_mb: float) -> Verdict:
    """The largest growth of any worker present both times is under `limit_mb`; no worker, no evidence."""
    if not before_mb or not after_mb:
        return failed("no worker process found to measure")
    common = before_mb.keys() & after_mb.keys()
    if not common:
        return failed("no worker present both before and after: restarted or not found")
    growth = max(after_mb[w] - before_mb[w] for w in common)
    return below(growth, limit_mb, "worker RSS growth (MiB)")


# Overload and a killed worker


def any_refused(refused: int | None) -> Verdict:
    if not _number(refused) or refused < 1:
        return failed("no request was refused with 503: the burst did not overload the queue")
    return held(f"{refused} requests refused with 503")


def percentile_below(values: Sequence[float] | None, q: float, limit: float, what: str) -> Verdict:
    if not values:
        return failed(f"{what}: none recorded")
    ordered = sorted(values)
    return below(ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))], limit, what)


def all_answered(answered: int | None, requested: int | None) -> Verdict:
    if not _number(answered) or not _number(requested) or requested < 1:
        return failed("no count of requests sent and answered")
    if answered != requested:
        return failed(f"{answered} of {requested} requests answered")
    return held(f"all {requested} requests answered")


def slowest_below(seconds: Sequence[float] | None, limit: float, what: str) -> Verdict:
    if not seconds:
        return failed(f"{what}: no answers recorded")
    return below(max(seconds), limit, what)


def happened(seconds: float | None, what: str) -> Verdict:
    """Something measured to have happened (`seconds` until it did; None: it did not)."""
    if not _number(seconds):
        return failed(f"{what}: did not happen")
    return held(f"{what} after {seconds:g} s")


def at_least(value: int | None, minimum: int, what: str) -> Verdict:
    if not _number(value):
        return failed(f"{what}: not measured")
    if value < minimum:
        return failed(f"{what}: {value}, fewer than {minimum}")
    return held(f"{what}: {value} >= {minimum}")


def closed_within(kinds: Mapping[str, Mapping] | None, bounds_s: Mapping[str, float], margin_s: float) -> Verdict:
    """Each kind of connection in `bounds_s` was closed by the server at least once, and never later than its bound
    plus `margin_s` (`kinds`: kind -> {"closed_by_server": n, "close_after_s": {"max": s, ...}})."""
    if not kinds or not bounds_s:
        return failed("no connections recorded")
    problems, seen = [], []
    for kind, bound in bounds_s.items():
        figures = kinds.get(kind) or {}
        closed, after = figures.get("closed_by_server"), figures.get("close_after_s") or {}
        if not _number(closed) or closed < 1 or not _number(after.get("max")):
            problems.append(f"{kind}: none closed by the server")
        elif after["max"] > bound + margin_s:
            problems.append(f"{kind}: closed after up to {after['max']:g} s, over {bound:g} s + {margin_s:g} s")
        else:
            seen.append(f"{kind}: {closed} closed, the latest after {after['max']:g} s (bound {bound:g} s)")
    if problems:
        return failed("; ".join(problems))
    return held("; ".join(seen))


def refused_beyond_bound(answers: Mapping[str, int] | None, past: int) -> Verdict:
    """Requests sent at once on connections opened until `past` of them were over a server's connection bound: some
    answered 503 and every other one 200 (each 503 closes its connection, so a later request may find room)."""
    if not answers or sum(answers.values()) < 1:
        return failed("no request was sent beyond the bound")
    others = {status: n for status, n in answers.items() if status not in ("200", "503")}
    if others:
        return failed(f"answers other than 200 and 503: {others}")
    if not answers.get("503"):
        return failed(f"none of {sum(answers.values())} requests was answered 503, {past} of them over the bound")
    rest = f", the other {answers['200']} 200" if answers.get("200") else ""
    return held(f"{answers['503']} of {sum(answers.values())} answered 503 ({past} over the bound when sent){rest}")


# Keys and the network surface


def key_refused(key_used: str | None, error: str | None, what: str) -> Verdict:
    """A request carrying `key_used` (None: there was no key to use) was refused as InvalidKeyException."""
    if not key_used:
        return failed(f"{what}: no key was read, so none was tried")
    if error != "InvalidKeyException":
        return failed(f"{what}: answered {error!r}, not InvalidKeyException")
    return held(f"{what}: refused with InvalidKeyException")


def invalid_key_refusal(status: int | None, error: str | None, what: str) -> Verdict:
    """A request was answered 400 or 401 InvalidKeyException."""
    if status not in (400, 401) or error != "InvalidKeyException":
        return failed(f"{what}: answered {status} {error!r}, not 400/401 InvalidKeyException")
    return held(f"{what}: {status} InvalidKeyException")


def refused(status: int | None, what: str) -> Verdict:
    """An HTTP answer came back and it was a refusal (4xx or 5xx); no answer is no evidence."""
    if not _number(status) or status < 100:
        return failed(f"{what}: no answer")
    if status < 400:
        return failed(f"{what}: answered {status}")
    return held(f"{what}: refused with {status}")


@dataclass(frozen=True)
class Probe:
    """One connection attempt to one of the service's ports."""

    host: str
    port: int
    connected: bool


def not_exposed(listening: Mapping[int, Sequence[str]] | None, probes: Sequence[Probe] | None, ports: Iterable[int]) -> Verdict:
    """Each of `ports` was found listening (`listening`: port -> local addresses of our processes'
    listening sockets) on loopback addresses only, and no probe from an outside address connected.
    `probes` is None when the outside addresses were not probed; [] when the host has none (then the
    listening addresses are the evidence)."""
    ports = sorted(set(ports))
    if not ports:
        return failed("no ports to check")
    if probes is None:
        return failed("the outside addresses were not probed")
    if not listening:
        return failed("no listening sockets of the service were found")
    missing = [p for p in ports if not listening.get(p)]
    if missing:
        return failed(f"ports {missing} were not found listening, so their addresses are unknown")
    exposed = {p: [a for a in listening[p] if not _loopback(a)] for p in ports}
    exposed = {p: a for p, a in exposed.items() if a}
    if exposed:
        return failed(f"listening on non-loopback addresses: {exposed}")
    reached = [f"{p.host}:{p.port}" for p in probes or () if p.connected]
    if reached:
        return failed(f"reachable from outside addresses: {reached}")
    tried = len(probes or ())
    return held(f"ports {ports} listen on loopback only; {tried} probes from outside addresses refused")


def _loopback(address: str) -> bool:
    address = address.removeprefix("::ffff:")  # an IPv4-mapped IPv6 address: the IPv4 address it maps
    return address.startswith("127.") or address in ("::1", "localhost")


# Hostile inputs, per class


def hostile_bounded(per_class: Mapping[str, Mapping] | None, worker_s: float = HOSTILE_WORKER_S,
                    growth_mb: float = HOSTILE_GROWTH_MB) -> Verdict:
    """Every hostile class was sent and cost under `worker_s` of worker time per input that reached a
    worker, and under `growth_mb` of worker RSS growth, each beyond what the good requests sent with
    it cost on their own."""
    hostile = {name: c for name, c in (per_class or {}).items() if c.get("hostile")}
    if not hostile:
        return failed("no hostile class was sent")
    problems = []
    for name, figures in sorted(hostile.items()):
        extra_s, growth = figures.get("extra_worker_s_per_input"), figures.get("extra_worker_growth_mb")
        if not figures.get("sent"):
            problems.append(f"{name}: nothing sent")
        elif not _number(extra_s) or not _number(growth):
            problems.append(f"{name}: worker time or memory not measured")
        elif extra_s >= worker_s or growth >= growth_mb:
            problems.append(f"{name}: {extra_s:.2f} s extra worker time per input, {growth:.0f} MiB growth")
    if problems:
        return failed("; ".join(problems[:8]))
    return held(f"{len(hostile)} hostile classes, each under {worker_s:g} s extra worker time and {growth_mb:g} MiB growth")


def good_answered_beside_hostile(good: Sequence[tuple[int, bool]] | None) -> Verdict:
    """Each good request sent in a batch with hostile ones (status, answer correct) got a correct 200."""
    if not good:
        return failed("no good request was sent beside the hostile ones")
    wrong = [g for g in good if g[0] != 200 or not g[1]]
    if wrong:
        return failed(f"{len(wrong)} of {len(good)} good requests beside hostile ones failed or answered wrongly: "
                      f"statuses {sorted({g[0] for g in wrong})}")
    return held(f"all {len(good)} good requests beside hostile ones answered correctly")


# Drain on stop


def no_accepted_lost(drain: Mapping | None) -> Verdict:
    """The drain measurement: requests the server accepted before the stop were all answered."""
    if not drain or not _number(drain.get("accepted")) or not _number(drain.get("lost")):
        return failed("no drain measurement")
    if drain["accepted"] < 1:
        return failed("no request was in flight when the server was stopped")
    if drain["lost"]:
        return failed(f"{drain['lost']} of {drain['accepted']} accepted requests lost")
    return held(f"all {drain['accepted']} accepted requests answered")


def exited_within_drain(drain: Mapping | None, margin_s: float = DRAIN_EXIT_MARGIN_S) -> Verdict:
    if not drain or not _number(drain.get("exit_s")) or not _number(drain.get("drain_timeout_s")):
        return failed("no drain measurement")
    return below(drain["exit_s"], drain["drain_timeout_s"] + margin_s, "seconds from stop to exit")


def grpc_calls_answered(calls: Mapping | None) -> Verdict:
    """The gRPC calls sent just before the stop (drain_measure.py): every one answered OK, none cut or refused."""
    if not calls or not _number(calls.get("sent")) or not _number(calls.get("answered")) or calls["sent"] < 1:
        return failed("no gRPC call was sent before the stop")
    if calls["answered"] < calls["sent"]:
        return failed(f"{calls['sent'] - calls['answered']} of {calls['sent']} gRPC calls not answered: {calls.get('statuses')}")
    return held(f"all {calls['sent']} gRPC calls answered, {calls.get('answered_after_stop_began', '?')} of them after the stop began")


# The soak


def drift_under(drift_pct: float | None, goal_pct: float, what: str) -> Verdict:
    if not _number(drift_pct):
        return failed(f"{what} drift: not measured")
    return below(drift_pct, goal_pct, f"{what} drift (%)")


def none_failed(total: int | None, failures: int | None, what: str) -> Verdict:
    """`total` requests (at least one) were sent and `failures` of them failed (must be 0)."""
    if not _number(total) or total < 1 or not _number(failures):
        return failed(f"no {what} were sent")
    if failures:
        return failed(f"{failures} of {total} {what} failed")
    return held(f"none of {total} {what} failed")


def no_growth(growth: int | None, what: str) -> Verdict:
    if not _number(growth):
        return failed(f"{what}: not measured")
    if growth > 0:
        return failed(f"{what} grew by {growth}")
    return held(f"{what} did not grow ({growth:+d})")


def same_handler(differences: Sequence[str] | None) -> Verdict:
    if differences is None:
        return failed("the served archive's handler was not compared with this checkout's")
    if differences:
        return failed(f"the archive's handler differs in {list(differences)[:5]}")
    return held("the archive packs this checkout's handler")
