"""The `slow clients` part of `tsvk robustness`: can slow and idle connections stop a good client from being answered?

The good client alone first sends a real photo every 0.1 s on a new connection for 10 s: what the machine gives it.
Then thousands of connections (5,000 by default: swarm.py) that never send a request, send their headers a byte every
few seconds, or fall idle after one request are held against the inference address, each opened again whenever the
server closes it, while the good client goes on from before the first of them opens until the hold ends. The hold
lasts the keep-alive bound plus 15 s, so every kind is seen closed where the server closes them. Then, with the swarm
still held, as many more connections as take the server past its connection bound each send a request at once, and
two requests carry headers over the size and count bounds.

The part's server is started with a connection bound just above the swarm (`served_properties`), so the connections
beyond it are few; every other bound is the default, and all of them are in the figures. TorchServe's Netty frontend
has none of these bounds but the headers' size and tsvk cannot change it: a check it cannot meet is reported under
`weaknesses`, with what TorchServe did, rather than failed.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from ...oip.connection_bounds import HttpBounds, key_of
from ...engines.torchserve.server import TORCHSERVE
from . import checks, watch
from .client import Answer, Target, histogram, percentile, send
from .parts import Service
from .swarm import IDLE, KEEP_ALIVE, SLOWLORIS, SwarmPlan, SwarmProcess, open_files_for

SLOW_CONNECTIONS = 5_000
GOOD_EVERY_S = 0.1  # the good client's pace: a photo this often, each on a new connection
GOOD_P99_S = 2.0
BASELINE_S = 10.0  # the good client alone first: what the machine gives it without the swarm
HOLD_BEYOND_KEEP_ALIVE_S = 15.0  # the hold: the keep-alive bound plus this, so keep-alive connections are seen closed
# A close counts as within its bound up to this late: the accept queue while thousands connect, the timer, and the
# client's own loop on a busy 2-vCPU machine.
CLOSE_MARGIN_S = 2.0
BOUND_ROOM = 500  # the part's server: a connection bound this far above the swarm (the good client's, reconnects)
BEYOND_EXTRA = 500  # connections opened past the bound (a tenth of the swarm's: some of it is always reconnecting)
OVERSIZE_HEADER_BYTES = 32 * 1024  # over the engine's 16 KiB and TorchServe's 8 KiB
MANY_HEADERS = 200  # 2 KiB of small header fields: within any size bound, over the engine's count
WINDOW_S = 10.0  # the good client's p99 per window: "throughout"

GOOD_ANSWERED = "every good request answered 200"
CLOSED = "idle connections closed within the bound"
BEYOND = "requests beyond the connection bound answered 503"
HEADERS = "oversize and too many headers refused 431"
# What an engine whose frontend tsvk cannot change cannot do, by engine. TorchServe 0.12's (ServerInitializer:
# HttpServerCodec with Netty's defaults, then HttpObjectAggregator) has no idle or read timeout and counts nothing.
KNOWN_WEAKNESSES = {TORCHSERVE: {
    CLOSED: "TorchServe's Netty frontend has no idle, keep-alive or header-read timeout: it holds every connection",
    BEYOND: "TorchServe accepts and serves any number of connections",
    HEADERS: "Netty bounds the request line (4 KiB) and headers (8 KiB) but not how many headers",
}}
# The bounds such an engine serves within, in words (tsvk's servers state theirs: HttpBounds).
FRONTEND_BOUNDS = {TORCHSERVE: "Netty's only: a request line of 4 KiB, headers of 8 KiB (400 beyond)"}


def good_p99_check(connections: int) -> str:
    return f"good client p99 under {GOOD_P99_S:g} s with {connections:,} slow/idle connections"


def held_check(connections: int) -> str:
    return f"{connections:,} slow/idle connections held at once"


def served_properties(connections: int) -> dict[str, str]:
    """config.properties for the part's server beyond `tsvk config`'s: the connection bound just above the swarm."""
    return {key_of(HttpBounds, "max_connections"): str(connections + BOUND_ROOM)}


def slow_clients(service: Service, engine: str, connections: int = SLOW_CONNECTIONS, hold_s: float | None = None) -> dict:
    """The measurement (module docstring) against `service`, served by `engine`; its figures and checks."""
    bounds = HttpBounds.from_properties(service.run.properties)
    host, port = _address(service.target.url)
    open_files_for(max(connections, bounds.max_connections) + BEYOND_EXTRA)
    hold_s = hold_s if hold_s is not None else bounds.keep_alive_s + HOLD_BEYOND_KEEP_ALIVE_S
    alone = _GoodClient(service.target, service.photo)
    alone.start()
    time.sleep(BASELINE_S)
    alone.stop()
    swarm = SwarmProcess(SwarmPlan(host, port, connections, _ping(host, service)))
    good = _GoodClient(service.target, service.photo)
    server = _ServerSampler(service)
    good.start()
    swarm.start()
    ramped = swarm.wait_ramped()
    server.sample_for(hold_s)
    good.stop()
    server.end(swarm.cpu_s())
    beyond = swarm.beyond(max(0, bounds.max_connections - connections) + BEYOND_EXTRA)
    probes = _header_probes(host, port, service)
    measured = _Measured(ramped, swarm.stop(), good, server, beyond, probes)
    return {**_figures(engine, connections, bounds, hold_s, measured), "good_client_alone": alone.figures()}


@dataclass(frozen=True)
class _Measured:
    ramped: bool
    swarm: dict  # the swarm's figures
    good: _GoodClient
    server: _ServerSampler
    beyond: collections.Counter  # the statuses of the requests beyond the connection bound
    probes: dict[str, str]  # the header probes' statuses


def _figures(engine: str, connections: int, bounds: HttpBounds, hold_s: float, measured: _Measured) -> dict:
    good_figures, seconds = measured.good.figures(), [a.seconds for _, a in measured.good.answers]
    kinds = measured.swarm["kinds"]
    verdicts = {
        held_check(connections): checks.at_least(measured.swarm["peak_open"], connections, "connections open at once"),
        GOOD_ANSWERED: checks.none_failed(len(seconds), good_figures["failures"], "good requests"),
        good_p99_check(connections): checks.percentile_below(seconds, 99, GOOD_P99_S, "the good client's p99 (s)"),
        CLOSED: checks.closed_within(kinds, {IDLE: bounds.header_timeout_s, SLOWLORIS: bounds.header_timeout_s,
                                             KEEP_ALIVE: bounds.keep_alive_s}, CLOSE_MARGIN_S),
        BEYOND: checks.refused_beyond_bound(dict(measured.beyond), BEYOND_EXTRA),
        HEADERS: checks.all_status([int(s) if s.isdigit() else 0 for s in measured.probes.values()], 431, "oversize header requests"),
    }
    beyond = {"connections": sum(measured.beyond.values()), "answers": dict(measured.beyond)}
    return {
        "engine": engine, "bounds": FRONTEND_BOUNDS.get(engine) or dataclasses.asdict(bounds), "connections": connections,
        "hold_s": hold_s, "ramped": measured.ramped, "good_client": good_figures, "swarm": measured.swarm,
        "server": measured.server.figures(), "beyond_bound": beyond, "header_probes": measured.probes,
        **checks.judged_with_weaknesses(verdicts, KNOWN_WEAKNESSES.get(engine, {})),
    }


class _GoodClient:
    """A photo every GOOD_EVERY_S on a new connection (a client arriving), from a thread of its own until `stop()`;
    `answers` holds (seconds since the start, answer) for each."""

    def __init__(self, target: Target, photo: bytes):
        self.target, self.photo = target, photo
        self.answers: list[tuple[float, Answer]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good client", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        began = next_at = time.monotonic()
        while not self._stopping.is_set():
            sent_at = time.monotonic() - began
            self.answers.append((sent_at, send(self.target, self.photo, extra_headers={"Connection": "close"})))
            next_at = max(next_at + GOOD_EVERY_S, time.monotonic())  # a late answer delays the next; it never bunches them
            self._stopping.wait(next_at - time.monotonic())

    def figures(self) -> dict:
        seconds = [a.seconds for _, a in self.answers]
        windows: dict[int, list[float]] = {}
        for at, answer in self.answers:
            windows.setdefault(int(at // WINDOW_S), []).append(answer.seconds)
        return {"requests": len(self.answers), "every_s": GOOD_EVERY_S, "statuses": histogram([a for _, a in self.answers]),
                "failures": sum(1 for _, a in self.answers if a.status != 200),
                "p50_s": _round(percentile(seconds, 50)), "p99_s": _round(percentile(seconds, 99)),
                "max_s": _round(max(seconds, default=None)),
                f"p99_s_per_{WINDOW_S:g}s": [_round(percentile(windows.get(i, []), 99)) for i in range(max(windows, default=-1) + 1)]}


class _ServerSampler:
    """The server process's memory and open files before the swarm and the largest while it is held, and the CPU the
    server and the swarm used over the hold (on one machine, the swarm's CPU is taken from the server's too)."""

    def __init__(self, service: Service):
        self.run = service.run
        self.before = self._sample()
        self.peak = dict(self.before)
        self.cpu: dict[str, float] = {}
        self._began, self._server_cpu_s = time.monotonic(), self._cpu_s()

    def sample_for(self, seconds: float) -> None:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            now = self._sample()
            self.peak = {k: max(v, self.peak.get(k, 0)) for k, v in now.items()}
            time.sleep(min(1.0, max(0.0, ends - time.monotonic())))

    def end(self, swarm_cpu_s: float) -> None:
        """The CPU each used since the sampler began, in cores (CPU seconds a second)."""
        seconds = time.monotonic() - self._began
        self.cpu = {"server_cores": round((self._cpu_s() - self._server_cpu_s) / seconds, 3),
                    "swarm_cores": round(swarm_cpu_s / seconds, 3), "machine_load_1min": round(os.getloadavg()[0], 2)}

    def _sample(self) -> dict:
        sample = watch.sample(self.run)
        return {"rss_mb": round(sample.rss_mb.get("frontend", 0.0), 1), "open_files": sample.fds.get("frontend", 0)}

    def _cpu_s(self) -> float:
        process = watch.named(self.run).get("frontend")
        try:
            times = process.cpu_times() if process is not None else None
        except psutil.Error:
            times = None
        return times.user + times.system if times is not None else 0.0

    def figures(self) -> dict:
        return {"before": self.before, "peak": self.peak, **self.cpu}


def _header_probes(host: str, port: int, service: Service) -> dict[str, str]:
    """The status of a request whose one header is over every size bound, and of one with too many small headers."""
    auth = "".join(f"{k}: {v}\r\n" for k, v in service.run.headers("inference").items())
    head = f"GET /ping HTTP/1.1\r\nHost: {host}\r\n{auth}"
    oversize = head + f"X-Big: {'a' * OVERSIZE_HEADER_BYTES}\r\n\r\n"
    many = head + "".join(f"X-{i}: a\r\n" for i in range(MANY_HEADERS)) + "\r\n"
    return {f"one {OVERSIZE_HEADER_BYTES // 1024} KiB header": _status_of(host, port, oversize.encode()),
            f"{MANY_HEADERS} small headers": _status_of(host, port, many.encode())}


def _status_of(host: str, port: int, request: bytes) -> str:
    """The status of the answer to `request` on a connection of its own; the error's name when none came."""
    try:
        with socket.create_connection((host, port), timeout=30) as connection:
            try:
                connection.sendall(request)
            except OSError:  # refused while still sending: the answer may be waiting
                pass
            line = connection.makefile("rb").readline()
    except OSError as err:
        return type(err).__name__
    parts = line.split(b" ")
    return parts[1].decode() if len(parts) > 1 else "none"


def _ping(host: str, service: Service) -> bytes:
    auth = "".join(f"{k}: {v}\r\n" for k, v in service.run.headers("inference").items())
    return f"GET /ping HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode()


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
