"""Thousands of slow and idle connections to one server, held from one process on an event loop of their own thread.

Three kinds, as a server sees them: `idle` connections never send a byte; `slowloris` ones send a request line and
then a header a byte every few seconds, never ending it; `keep-alive` ones send one whole request, read its answer and
fall silent. Whenever the server closes one, the time it took is recorded (from the connection's opening, or from its
answer for a keep-alive one) and the connection is opened again, so the server holds as many for as long as the run
lasts. Every connection is a coroutine on asyncio's sockets, so 5,000 of them cost a few MiB and one thread; the
process's open-files limit is raised to its hard limit first (`open_files_for`). `SwarmProcess` runs them in a process
of their own, so that a client measured beside them shares no interpreter with them (nor its lock).
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import random
import resource
import threading
import time
from dataclasses import dataclass, field

import psutil

IDLE, SLOWLORIS, KEEP_ALIVE = "idle", "slowloris", "keep-alive"
MIX = ((IDLE, 0.4), (SLOWLORIS, 0.4), (KEEP_ALIVE, 0.2))  # shares of the connections
DRIP_S = (2.0, 5.0)  # a slowloris connection's pause between two header bytes, drawn uniformly (spreads the drips)
RAMP_TIMEOUT_S = 120.0  # for every connection to be opened (or to fail) once
OPEN_AT_ONCE = 256  # connects in flight: more at once only overflow the server's accept queue
CONNECT_TIMEOUT_S = 10.0
RETRY_S = 1.0  # after a connect that failed
WINDOW_S = 10.0  # the closes' timeline counts them per window
OPEN_FILES_MARGIN = 256  # beyond the connections: the good client, the results, the interpreter's own files


@dataclass(frozen=True)
class SwarmPlan:
    host: str
    port: int
    connections: int
    request: bytes  # the whole request a keep-alive connection sends (and a connection beyond the bound)
    mix: tuple[tuple[str, float], ...] = MIX
    drip_s: tuple[float, float] = DRIP_S

    def kinds(self) -> list[str]:
        """One kind per connection, in the mix's shares (the last kind takes what rounding leaves)."""
        counts = [round(self.connections * share) for _, share in self.mix[:-1]]
        counts.append(self.connections - sum(counts))
        return [kind for (kind, _), count in zip(self.mix, counts) for _ in range(count)]


@dataclass
class _Tally:
    """What happened to the connections of one kind."""

    planned: int = 0
    opened: int = 0
    closed: int = 0  # by the server (an end of stream or a reset)
    resets: int = 0
    close_after_s: list[float] = field(default_factory=list)
    # Statuses seen: a keep-alive connection's answer, what came as the server closed the others ("none": nothing)
    answers: collections.Counter = field(default_factory=collections.Counter)
    connect_failures: collections.Counter = field(default_factory=collections.Counter)

    def figures(self) -> dict:
        after = sorted(self.close_after_s)
        spread = {"min": _round(after[0]), "p50": _round(after[len(after) // 2]), "max": _round(after[-1])} if after else None
        return {"connections": self.planned, "opened": self.opened, "closed_by_server": self.closed, "resets": self.resets,
                "close_after_s": spread, "answers": dict(sorted(self.answers.items())), "connect_failures": dict(self.connect_failures)}


class Swarm:
    """The plan's connections, opened by `start()` and held until `stop()`; `ramped` is set once each was opened
    (or failed to) once. `beyond(count)` opens that many more and sends each the plan's request at once."""

    def __init__(self, plan: SwarmPlan):
        self.plan = plan
        self.tallies = {kind: _Tally() for kind, _ in plan.mix}
        self.open = self.peak_open = self._first_tries = 0
        self.ramped = threading.Event()
        self.ramp_s: float | None = None
        self.closes: list[float] = []  # seconds since the start at which the server closed a connection
        self._began = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._loop_ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), name="swarm", daemon=True)
        self._thread.start()
        self._loop_ready.wait()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()

    def beyond(self, count: int, timeout_s: float = 60.0) -> collections.Counter:
        """`count` more connections, all opened before any sends the request; the answers' statuses."""
        return asyncio.run_coroutine_threadsafe(self._beyond(count), self._loop).result(timeout_s)

    def figures(self) -> dict:
        windows = collections.Counter(int(at // WINDOW_S) for at in self.closes)
        return {"planned": self.plan.connections, "peak_open": self.peak_open, "ramp_s": _round(self.ramp_s),
                "kinds": {kind: tally.figures() for kind, tally in self.tallies.items()},
                f"server_closes_per_{WINDOW_S:g}s": [windows.get(i, 0) for i in range(max(windows, default=-1) + 1)]}

    async def _run(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        self._loop_ready.set()
        gate = asyncio.Semaphore(OPEN_AT_ONCE)
        kinds = self.plan.kinds()
        for kind in kinds:
            self.tallies[kind].planned += 1
        tasks = [asyncio.create_task(self._hold(kind, gate)) for kind in kinds]
        await self._stopping.wait()
        await _cancel_all(tasks)

    async def _hold(self, kind: str, gate: asyncio.Semaphore) -> None:
        """One connection of `kind`, opened again whenever the server closes it, until the swarm stops."""
        first = True
        while not self._stopping.is_set():
            async with gate:
                streams = await self._connect(self.tallies[kind].connect_failures)
            if first:
                first = False
                self._tried_once()
            if streams is None:
                await asyncio.sleep(RETRY_S)
                continue
            await self._held(kind, *streams)

    async def _connect(self, failures: collections.Counter):
        """A connection's streams; None (the failure counted by its exception's name) when it could not be opened."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # not wait_for: on Python 3.11 it can swallow a cancellation
                return await asyncio.open_connection(self.plan.host, self.plan.port)
        except (OSError, TimeoutError) as err:
            failures[type(err).__name__] += 1
            return None

    async def _held(self, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tally = self.tallies[kind]
        tally.opened += 1
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        try:
            after_s, reset = await _BEHAVIOURS[kind](self, tally, reader, writer)
            tally.closed += 1
            tally.resets += reset
            tally.close_after_s.append(after_s)
            self.closes.append(time.monotonic() - self._began)
        finally:
            self.open -= 1
            writer.transport.abort()  # closed by the server, or the swarm stops: nothing is left to say

    def _tried_once(self) -> None:
        self._first_tries += 1
        if self._first_tries == self.plan.connections:
            self.ramp_s = time.monotonic() - self._began
            self.ramped.set()

    async def _idle(self, tally: _Tally, reader, writer) -> tuple[float, bool]:
        began = time.monotonic()
        received, reset = await _until_closed(reader)
        tally.answers[_status(received)] += 1
        return time.monotonic() - began, reset

    async def _slowloris(self, tally: _Tally, reader, writer) -> tuple[float, bool]:
        """A request line and a header that never ends, a byte at a time; the server's close ends the drip."""
        began = time.monotonic()
        writer.write(f"GET /ping HTTP/1.1\r\nHost: {self.plan.host}\r\nX-Slow: ".encode())
        drip = asyncio.create_task(self._drip(writer))
        try:
            received, reset = await _until_closed(reader)
        finally:
            drip.cancel()
        tally.answers[_status(received)] += 1
        return time.monotonic() - began, reset

    async def _drip(self, writer: asyncio.StreamWriter) -> None:
        while not writer.is_closing():
            await asyncio.sleep(random.uniform(*self.plan.drip_s))
            writer.write(b"a")

    async def _keep_alive(self, tally: _Tally, reader, writer) -> tuple[float, bool]:
        """One whole request, its answer read, then silence: the time from the answer to the server's close."""
        writer.write(self.plan.request)
        try:
            tally.answers[await _read_answer(reader)] += 1
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            tally.answers["no answer"] += 1
            return 0.0, True
        began = time.monotonic()
        received, reset = await _until_closed(reader)
        if received:
            tally.answers[f"then {_status(received)}"] += 1
        return time.monotonic() - began, reset

    async def _beyond(self, count: int) -> collections.Counter:
        gate, failures = asyncio.Semaphore(OPEN_AT_ONCE), collections.Counter()

        async def opened():
            async with gate:
                return await self._connect(failures)

        connections = [c for c in await asyncio.gather(*(opened() for _ in range(count))) if c is not None]
        statuses = collections.Counter({f"connect failed: {name}": n for name, n in failures.items()})
        try:
            statuses.update(await asyncio.gather(*(self._ask(*c) for c in connections)))
        finally:  # only now: a connection closed as soon as it is answered would make room for the next
            for _, writer in connections:
                writer.transport.abort()
        return statuses

    async def _ask(self, reader, writer) -> str:
        writer.write(self.plan.request)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await _read_answer(reader)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, TimeoutError) as err:
            return type(err).__name__


_BEHAVIOURS = {IDLE: Swarm._idle, SLOWLORIS: Swarm._slowloris, KEEP_ALIVE: Swarm._keep_alive}


async def _cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel the tasks until every one has ended (a cancellation that arrives as a connect completes can be lost)."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)


async def _until_closed(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Whatever the server sends until it closes the connection (its first 1 KiB), and whether it reset it."""
    received = b""
    try:
        while chunk := await reader.read(65536):
            received = (received + chunk)[:1024]
    except ConnectionError:
        return received, True
    return received, False


async def _read_answer(reader: asyncio.StreamReader) -> str:
    """An answer's status, its body read by its Content-Length (or to the end of its chunks)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = _status(head)
    headers = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")[1:] if b":" in line}
    if b"content-length" in headers:
        await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        await reader.readuntil(b"0\r\n\r\n")
    return status


def _status(received: bytes) -> str:
    """The status of an answer's first line ("none" when nothing came)."""
    if not received:
        return "none"
    parts = received.split(b"\r\n", 1)[0].split(b" ")
    return parts[1].decode(errors="replace") if len(parts) > 1 and parts[0].startswith(b"HTTP/") else "not HTTP"


class SwarmProcess:
    """A Swarm in a child process (spawned: it imports only this module), driven over a pipe: `start`, `wait_ramped`,
    `beyond`, then `stop`, which returns its figures."""

    def __init__(self, plan: SwarmPlan, ramp_timeout_s: float = RAMP_TIMEOUT_S):
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(plan, child, ramp_timeout_s), name="swarm", daemon=True)

    def start(self) -> None:
        self._process.start()

    def wait_ramped(self) -> bool:
        """Whether every connection was opened (or failed to) once within the ramp's timeout."""
        return self._pipe.recv()

    def beyond(self, count: int) -> collections.Counter:
        self._pipe.send(("beyond", count))
        return self._pipe.recv()

    def cpu_s(self) -> float:
        """The swarm's CPU seconds so far: what holding the connections costs the machine the server shares."""
        times = psutil.Process(self._process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> dict:
        self._pipe.send(("stop", None))
        figures = self._pipe.recv()
        self._process.join()
        return figures


def _serve(plan: SwarmPlan, pipe, ramp_timeout_s: float) -> None:
    """The child's side: the swarm started, its ramp said, then commands until "stop" (answered with the figures)."""
    swarm = Swarm(plan)
    swarm.start()
    pipe.send(swarm.ramped.wait(ramp_timeout_s))
    while True:
        command, argument = pipe.recv()
        if command == "beyond":
            pipe.send(swarm.beyond(argument))
        else:
            swarm.stop()
            pipe.send(swarm.figures())
            return


def open_files_for(connections: int) -> int:
    """Raise this process's open-files limit to its hard limit; ValueError when that still cannot hold `connections`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft < connections + OPEN_FILES_MARGIN:
        raise ValueError(f"{connections} connections need {connections + OPEN_FILES_MARGIN} open files; this process may open {soft} "
                         "(ulimit -Hn): raise it, or ask for fewer connections")
    return soft


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
