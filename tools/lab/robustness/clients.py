"""Hostile clients: what a client can do to a server with the request around the image rather than the image itself.

Each class aims at one bound and is judged on its own: bodies over `max_request_size` in every framing and method
(refused 413 after at most the limit and what the sockets buffer), eight 200 MiB bodies at once (the server's memory,
all its processes, grows by at most eight limits and a margin), a gRPC message over the limit, `Authorization`
headers of any bytes, malformed multipart forms, inputs whose refusal could leak internals (the body must carry
tsvk's code and a message, never an exception's text or a source path), and an `X-Request-Start` stamp from a client
the config does not trust. A good request is answered after every class.

Where the engine under test cannot hold a class for a reason outside tsvk's code (TorchServe's Java frontend), the
class is listed under the part's `weaknesses` with that reason, not counted as held.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from tsvk.common import read_properties
from tsvk.worker import ARRIVAL_HEADER

from ... import defaults
from ...keys import current_key
from ...engines.torchserve.server import TORCHSERVE
from . import checks, watch
from .attacks import multipart
from .auth import front_processes
from .checks import Verdict
from .client import send
from .corpus import seed_images
from .hostile import send_grpc
from .parts import Service
from .raw_http import FRAMINGS, UNFRAMED, send_body

METHODS = ("POST", "PUT")
OVERSIZE_FACTOR = 4  # a refused body is sent at this many times the limit: a server reading it whole is seen
BURST_BODIES = 8  # bodies over the limit arriving at once
BURST_BODY_BYTES = 200 * 2**20  # each of them
BURST_MARGIN_MB = 128.0  # server growth allowed beyond one limit per body in flight
BURST_GROWTH = f"{BURST_BODIES} bodies of 200 MiB at once grow the server by at most {BURST_BODIES} limits + {BURST_MARGIN_MB:g} MiB"
INTERNALS = ("Traceback", ".py\"", ".py:", ".cpp", "site-packages", "/__w/", "Error:", "java.lang.")  # what no client may read
STAMP_AGE_S = 3600.0  # an arrival stamp an hour old: a server that believed it would shed the request
# Bytes a client may have written past the limit before the refusal reaches it: what loopback's socket buffers hold
# (their largest sizes, send and receive) beyond what the server read. Read from the kernel where it says.
TCP_BUFFERS = (Path("/proc/sys/net/ipv4/tcp_wmem"), Path("/proc/sys/net/ipv4/tcp_rmem"))
TCP_BUFFER_FALLBACK = 8 * 2**20
_NETTY_FORMS = ("TorchServe's frontend decodes a form with Netty before any handler runs, and answers a part without a name "
                "500 with the decoder's NullPointerException text (tsvk's engine: 400 saying the part has no name)")
KNOWN_WEAKNESSES = {
    TORCHSERVE: {
        BURST_GROWTH: "TorchServe's frontend reads each body into Netty's aggregator up to max_request_size before it refuses "
                      "it, in pooled buffers that grow by doubling, and the JVM keeps what it grew (8 bodies: 14-16 limits)",
        "a malformed form or a part over the limit is refused 400/413": _NETTY_FORMS,
        "a refused form's body names no internals": _NETTY_FORMS,
        "an untrusted arrival stamp is not believed": "TorchServe's frontend hands the worker the client's X-Request-Start "
        "and keeps no arrival time of its own, so the handler cannot tell a proxy's stamp from a client's "
        "(tsvk's engine stamps arrival itself and believes only tsvk.trusted_proxies)",
    },
}


def hostile_clients(service: Service, engine: str) -> dict:
    """Every class against the served model; its figures, its checks, and the engine's listed weaknesses."""
    limit = max_request_bytes(service)
    figures = {"max_request_size": limit, "slack_bytes": socket_slack_bytes()}
    verdicts: dict[str, Verdict] = {}
    for name, measure in _CLASSES:
        evidence, found = measure(service, limit)
        figures[name] = evidence
        verdicts.update(found)
    good = send(service.target, service.photo)
    figures["good request after"] = good.status
    verdicts["a good request answered after every class"] = checks.all_status([good.status], 200, "the good request after")
    return {**figures, **checks.judged_with_weaknesses(verdicts, KNOWN_WEAKNESSES.get(engine, {}))}


def max_request_bytes(service: Service) -> int:
    properties = read_properties(service.run.config)
    return int(properties.get("max_request_size", defaults.MAX_REQUEST_MB * 2**20))


def socket_slack_bytes() -> int:
    """The largest send and receive buffers loopback may grow to, together."""
    try:
        return sum(int(path.read_text().split()[-1]) for path in TCP_BUFFERS)
    except (OSError, ValueError, IndexError):
        return TCP_BUFFER_FALLBACK


def _headers(service: Service) -> dict[str, str]:
    key = current_key(service.run.run_dir)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _path(service: Service) -> str:
    return f"/predictions/{service.model}"


# Bodies over the limit


def oversize_bodies(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """Each method in each framing, OVERSIZE_FACTOR limits of body: the answer, and what the client got to send first.
    A body without any length on HTTP/1.0 is a request with no body (RFC 9112): it is refused as such, not read."""
    slack, answers = socket_slack_bytes(), {}
    for method in METHODS:
        for framing in FRAMINGS:
            answer = send_body(service.run.url("inference"), method, _path(service), _headers(service), OVERSIZE_FACTOR * limit,
                               framing, timeout_s=service.client_timeout_s)
            answers[f"{method} {framing}"] = {"status": answer.status, "sent": answer.sent,
                                              "body": answer.body[:200].decode(errors="replace")}
    framed = {k: a for k, a in answers.items() if not k.endswith(UNFRAMED)}
    return answers, {
        "a body over max_request_size is refused 413 (Content-Length, chunked)": _all_413(framed),
        "a body without a length is refused 4xx": _all_4xx({k: a for k, a in answers.items() if k.endswith(UNFRAMED)}),
        "a refused body is read no further than the limit and the socket buffers": _read_bounded(answers, limit + slack),
    }


def _all_413(answers: dict[str, dict]) -> Verdict:
    other = {k: a["status"] for k, a in answers.items() if a["status"] != 413}
    if not answers or other:
        return checks.failed(f"not 413: {other}" if answers else "no answers")
    return checks.held(f"all {len(answers)} ({', '.join(answers)}) refused 413")


def _all_4xx(answers: dict[str, dict]) -> Verdict:
    other = {k: a["status"] for k, a in answers.items() if not 400 <= a["status"] < 500}
    if not answers or other:
        return checks.failed(f"not 4xx: {other}" if answers else "no answers")
    return checks.held(f"all {len(answers)} refused with {sorted({a['status'] for a in answers.values()})}")


def _read_bounded(answers: dict[str, dict], bound: int) -> Verdict:
    over = {k: a["sent"] for k, a in answers.items() if a["sent"] > bound}
    if not answers or over:
        return checks.failed(f"sent past {bound} bytes before the refusal: {over}" if answers else "no answers")
    return checks.held(f"at most {max(a['sent'] for a in answers.values())} bytes sent before each refusal (bound {bound})")


def oversize_burst(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """BURST_BODIES chunked bodies of BURST_BODY_BYTES at once while the RSS of every server process is sampled."""
    extra = front_processes(service.run)
    barrier = threading.Barrier(BURST_BODIES)

    def one(_) -> int:
        barrier.wait()
        return send_body(service.run.url("inference"), "POST", _path(service), _headers(service), BURST_BODY_BYTES, "chunked",
                         timeout_s=service.client_timeout_s).status

    with watch.PeakTotalRss(service.run, extra) as rss, ThreadPoolExecutor(BURST_BODIES) as pool:
        statuses = list(pool.map(one, range(BURST_BODIES)))
    bound_mb = BURST_BODIES * limit / 2**20 + BURST_MARGIN_MB
    growth = rss.growth_mb
    evidence = {"bodies": BURST_BODIES, "bytes_each": BURST_BODY_BYTES, "statuses": statuses, "rss_before_mb": rss.before_mb,
                "rss_peak_mb": rss.peak_mb, "growth_mb": growth, "bound_mb": bound_mb}
    return evidence, {
        f"{BURST_BODIES} bodies of 200 MiB at once all refused 413": checks.all_status(statuses, 413, "the burst's answers"),
        BURST_GROWTH: checks.below(growth, bound_mb, "the server's RSS growth (MiB, all processes)"),
    }


def oversize_grpc(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """A ModelInferRequest of OVERSIZE_FACTOR limits to the served gRPC (the engine's, or the OIP front's): refused by
    the transport's message bound, before any of it is parsed."""
    from tritonclient.grpc import service_pb2  # the front's client: only when a run sends gRPC

    if service.front is None:
        return {"sent": False}, {"a gRPC message over the limit is refused": checks.failed("no gRPC served")}
    request = service_pb2.ModelInferRequest(raw_input_contents=[b"\xff" * (OVERSIZE_FACTOR * limit)]).SerializeToString()
    answer = send_grpc(service, service.model, request)
    return {"status": answer.status, "error": answer.error}, {
        "a gRPC message over the limit is refused (RESOURCE_EXHAUSTED)": checks.all_status([answer.status], 413, "the gRPC answer"),
    }


# Headers, forms, error bodies, arrival stamps

AUTHORIZATIONS = {"non-ASCII bytes": b"Bearer \xff\xfe", "UTF-8 text": "Bearer ключ".encode(), "another scheme": b"Basic dXNlcjpwYXNz",
                  "scheme alone": b"Bearer", "4 KiB token": b"Bearer " + b"A" * 4096, "empty": b""}


def authorization_headers(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """Each Authorization header without the key, on /predictions and the protocol's REST infer path."""
    urls = {"/predictions": service.target.url, **({"/v2 infer": service.front_target(service.model).url} if service.front else {})}
    statuses = {}
    for name, value in AUTHORIZATIONS.items():
        for path, url in urls.items():
            statuses[f"{name} on {path}"] = _post(url, service.photo, {"Authorization": value})[0]
    refused = {k: s for k, s in statuses.items() if s not in (400, 401)}
    verdict = checks.held(f"all {len(statuses)} refused 400/401") if statuses and not refused else checks.failed(
        f"not 400/401: {refused}" if statuses else "no answers")
    return statuses, {"any Authorization header without the key is refused 400/401": verdict}


def _post(url: str, body: bytes, headers: dict, timeout_s: float = 60.0) -> tuple[int, str]:
    try:
        answer = requests.post(url, data=body, headers=headers, timeout=timeout_s)
    except requests.RequestException as err:
        return 0, type(err).__name__
    return answer.status_code, answer.text


BOUNDARY = "tsvkattackboundary"


def malformed_forms(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """Broken multipart forms, and a form whose one part is over the limit: 400/413 without internals."""
    answers = {name: _post(service.target.url, body, {**_headers(service), "Content-Type": content_type})
               for name, (content_type, body) in _forms(service.photo, limit).items()}
    evidence = {name: {"status": status, "body": text[:200]} for name, (status, text) in answers.items()}
    other = {k: s for k, (s, _) in answers.items() if s not in (400, 413)}
    leaks = _leaks(answers)
    return evidence, {
        "a malformed form or a part over the limit is refused 400/413":
            checks.failed(f"answered {other}") if other else checks.held(f"all {len(answers)} refused 400/413"),
        "a refused form's body names no internals": _no_leaks(leaks, len(answers)),
    }


def _forms(photo: bytes, limit: int) -> dict[str, tuple[str, bytes]]:
    declared = f"multipart/form-data; boundary={BOUNDARY}"
    _, form = multipart(photo, {})
    return {
        "no boundary parameter": ("multipart/form-data", form),
        "another boundary": (declared, form.replace(BOUNDARY.encode(), b"someotherboundary")),
        "cut short": (declared, form[: len(form) // 2]),
        "part without a name": (declared, f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode()),
        "not multipart syntax": (declared, f"--{BOUNDARY}junk\r\n\r\n--{BOUNDARY}--\r\n".encode()),
        "a part over the limit": multipart(b"\xff" * (limit + 1), {}),
    }


def _leaks(answers: dict[str, tuple[int, str]]) -> dict[str, str]:
    return {name: next(mark for mark in INTERNALS if mark in text) for name, (_, text) in answers.items()
            if any(mark in text for mark in INTERNALS)}


def _no_leaks(leaks: dict[str, str], count: int) -> Verdict:
    if leaks:
        return checks.failed(f"internals in the body: {leaks}")
    if not count:
        return checks.failed("no answers")
    return checks.held(f"none of {count} refusals quotes a traceback, a source path or an exception")


def error_bodies(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """Inputs a decoder or parser fails on: each refused 4xx in tsvk's words, quoting no internals."""
    jpeg = seed_images()["jpeg"]
    raw, as_json = "application/octet-stream", "application/json"
    inputs = {"truncated JPEG": (jpeg[: len(jpeg) // 2], raw), "JPEG header alone": (jpeg[:20], raw),
              "random bytes": (bytes(range(256)) * 4, raw), "empty body": (b"", raw),
              "JSON of the wrong type": (b'{"data": 12}', as_json), "broken JSON": (b'{"data": ', as_json)}
    answers = {name: _post(service.target.url, body, {**_headers(service), "Content-Type": content_type})
               for name, (body, content_type) in inputs.items()}
    evidence = {name: {"status": status, "body": text[:200]} for name, (status, text) in answers.items()}
    other = {k: s for k, (s, _) in answers.items() if not 400 <= s < 500}
    return evidence, {
        "an input the handler cannot read is refused 4xx": checks.failed(f"answered {other}") if other else checks.held(
            f"all {len(answers)} refused 4xx"),
        "an error body names no internals": _no_leaks(_leaks(answers), len(answers)),
    }


def arrival_stamp(service: Service, limit: int) -> tuple[dict, dict[str, Verdict]]:
    """A request stamped an hour before it was sent, by a client no config trusts: answered, not shed as late."""
    stamp = f"t={time.time() - STAMP_AGE_S:.6f}"
    answer = send(service.target, service.photo, extra_headers={ARRIVAL_HEADER: stamp})
    evidence = {"deadline_ms": service.deadline_ms, "stamp_age_s": STAMP_AGE_S, "status": answer.status, "error": answer.error}
    if service.deadline_ms is None:
        verdict = checks.failed("the service has no deadline: a stamp could not be believed or not")
    else:
        verdict = checks.all_status([answer.status], 200, "a request stamped an hour ago by the client")
    return evidence, {"an untrusted arrival stamp is not believed": verdict}


_CLASSES = (
    ("oversize bodies", oversize_bodies),
    ("oversize burst", oversize_burst),
    ("oversize gRPC", oversize_grpc),
    ("authorization headers", authorization_headers),
    ("malformed forms", malformed_forms),
    ("error bodies", error_bodies),
    ("arrival stamp", arrival_stamp),
)
