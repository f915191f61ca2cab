"""A model's worker processes: each started with the archive unpacked, fed batches by the model's batcher, and
replaced when it dies or breaks, the requests it held answered 503 at once.

A worker holds one end of a socket pair; the other end is this process's. When a worker dies its end closes, so the
batch it held is answered the moment the read sees the end of the stream (well within a second), and a new worker
is started in its place while the other workers go on taking batches. A worker that answers with bytes that are no
message (a length over the bound, a payload that does not unpickle) or with the wrong answer (another batch's, or not
one (status, body) per request) is broken: it is ended by its pid and replaced the same way, as TorchServe's frontend
drops a worker whose message it cannot decode, so no request of its batch is left waiting on it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tsvk.common import RequestError
from tsvk.worker import refusal

from ... import defaults
from . import wire
from ..shared.archives import ServedModel
from ..shared.batcher import Batcher, Pending
from .files import WORKER_MODULE
from .forkserver import ForkServer
from ..shared.metrics import EngineMetrics

log = logging.getLogger(__name__)

RESTART_PAUSE_S = 1.0  # between a refused restart and the next try
DIED_STATUS = 503
FORKED_WAIT_POLL_S = 0.05  # how often a killed forked worker (not this process's child) is checked for its end
CHANNEL_SEND_BYTES = 8 << 20  # asked of the kernel (it grants up to net.core.wmem_max): a photo in a few sends, not dozens
MAX_MESSAGE_BYTES = defaults.ENGINE_MAX_WORKER_MESSAGE_MB * 2**20


class WorkerGone(Exception):
    """The worker exited (killed, out of memory, crashed) or outlived the response timeout."""

    what = "is gone with"  # the log's words: "worker 0 (pid 12) is gone with a batch of 3 (why)"


class WorkerBroken(WorkerGone):
    """The worker answered with a broken message (wire.BrokenMessage): it is ended and replaced like one that died."""

    what = "sent a broken answer to"


@dataclass(frozen=True)
class WorkerStart:
    """How a model's workers are started: the config, where their output goes, their environment, and the fork
    server to ask for them (None, or gone: each worker is a fresh interpreter)."""

    config: Path
    log: Path
    env: dict[str, str]
    forks: ForkServer | None = None


class _Spawned:
    """A worker started as a fresh interpreter (no fork server): pid, alive, kill, wait."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.pid = process.pid

    def alive(self) -> bool:
        return self.process.returncode is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()

    async def wait(self) -> None:
        await self.process.wait()


class ForkedWorker:
    """A worker the fork server started: pid, alive, kill, wait."""

    def __init__(self, forks: ForkServer, pid: int):
        self.forks = forks
        self.pid = pid

    def alive(self) -> bool:
        return self.forks.is_running_child(self.pid)

    def kill(self) -> None:
        self.forks.kill(self.pid)

    async def wait(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(FORKED_WAIT_POLL_S)


class WorkerProcess:
    def __init__(self, model: ServedModel, start: WorkerStart, number: int):
        self.model = model
        self.start_info = start
        self.number = number
        self.handle: _Spawned | ForkedWorker | None = None
        self.channel: socket.socket | None = None  # the server's end of the socket pair, non-blocking, on the event loop
        self.loaded = False  # said READY since it was last started: its archive is loaded, it takes batches
        self.batch_ids = itertools.count()  # each batch's own id, so that an answer to another batch is told apart

    @property
    def pid(self) -> int | None:
        return self.handle.pid if self.handle else None

    async def start(self) -> str | None:
        """Start the process and wait until its service has loaded: None, or the one-line reason it cannot. A worker that
        hangs while loading is ended after the startup timeout: otherwise the server would wait for it forever, never
        serving its model nor saying why."""
        ours, theirs = socket.socketpair()
        with open(self.start_info.log, "ab") as out, theirs:
            self.handle = await self._forked(theirs, out) or await self._spawned(theirs, out)
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_SEND_BYTES)
        self.channel = ours
        timeout = self.model.startup_timeout_s
        try:
            message = await asyncio.wait_for(wire.read_message(ours, MAX_MESSAGE_BYTES), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            return (f"it had not loaded {timeout:g} s after it started (the model's startupTimeout, else the config's "
                    "default_startup_timeout); it was ended")
        except wire.BrokenMessage as err:
            await self.kill()
            return f"it sent {err} instead of saying it had loaded; it was ended"
        if wire.said(message, wire.READY):
            self.loaded = True
            return None
        await self.kill()
        if message is None:
            return "the worker exited while loading"
        return str(message[1]) if wire.said(message, wire.REFUSED) else "its first message was not that it had loaded; it was ended"

    async def _forked(self, theirs: socket.socket, out) -> ForkedWorker | None:
        """The worker forked by the fork server, or None where there is none (or it cannot): then it is spawned."""
        forks = self.start_info.forks
        if forks is None or not forks.alive():
            return None
        try:
            pid = await asyncio.to_thread(forks.fork, self._arguments(), self.start_info.env, self.model.directory,
                                          theirs.fileno(), out.fileno())
        except OSError as err:
            log.warning("%s: the fork server cannot start worker %d (%s); starting a fresh interpreter", self.model.name,
                        self.number, err)
            return None
        return ForkedWorker(forks, pid)

    async def _spawned(self, theirs: socket.socket, out) -> _Spawned:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", WORKER_MODULE, *self._arguments(), "--fd", str(theirs.fileno()), stdout=out, stderr=out,
            pass_fds=(theirs.fileno(),), cwd=self.model.directory, env=self.start_info.env)
        return _Spawned(process)

    def _arguments(self) -> list[str]:
        """The worker's command-line arguments but its socket's descriptor (which differs in each process)."""
        m = self.model
        arguments = ["--model-dir", str(m.directory), "--model-name", m.name, "--handler", m.handler,
                     "--settings", m.settings_file, "--config", str(self.start_info.config), "--batch-size", str(m.batch_size),
                     "--served-properties", json.dumps(dict(m.worker_properties), sort_keys=True)]
        return arguments + (["--gpu-id", str(m.gpu_ids[self.number % len(m.gpu_ids)])] if m.gpu_ids else [])

    async def run(self, batch: list[Pending]) -> tuple[list[tuple[int, bytes]], list]:
        """The worker's (status, body) for each request of the batch and the handler's metric samples; WorkerGone, or
        WorkerBroken for an answer that is no message or not this batch's."""
        batch_id = next(self.batch_ids)
        try:
            answer = await asyncio.wait_for(self._exchange(batch_id, batch), self.model.response_timeout_s)
            if answer is None:
                raise WorkerGone("the worker's socket closed")
            return wire.batch_answer(answer, batch_id, len(batch))
        except (ConnectionError, asyncio.TimeoutError) as err:
            raise WorkerGone(f"{type(err).__name__}") from None
        except wire.BrokenMessage as err:
            raise WorkerBroken(str(err)) from None

    async def _exchange(self, batch_id: int, batch: list[Pending]) -> object | None:
        """Send the batch and read what the worker says back; both within the response timeout, as a worker that
        stopped reading holds the send as long as one that stopped answering holds the read."""
        await wire.send_batch(self.channel, (batch_id, [p.request for p in batch], [p.arrival_s for p in batch]))
        return await wire.read_message(self.channel, MAX_MESSAGE_BYTES)

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def ready(self) -> bool:
        """Loaded and still running: what a status calls READY (a process still loading its archive is not)."""
        return self.loaded and self.alive()

    async def kill(self) -> None:
        self.loaded = False
        if self.channel is not None:
            self.channel.close()
        if self.handle is not None:
            self.handle.kill()
            await self.handle.wait()


class ModelPool:
    """One model's workers, each taking batches from the model's batcher in a loop of its own."""

    def __init__(self, model: ServedModel, start: WorkerStart, metrics: EngineMetrics | None = None):
        self.model = model
        self.metrics = metrics or EngineMetrics()
        self.batcher = Batcher(model.batch_size, model.max_batch_delay_ms, model.queue_size)
        self.workers = [WorkerProcess(model, start, n) for n in range(model.workers)]
        self.ready_workers = 0
        self.starts = 0
        self.deaths = 0
        self.on_change: Callable[[], None] = lambda: None  # called when a worker starts or dies
        self._loops: list[asyncio.Task] = []

    async def start(self) -> str | None:
        """Start every worker; None once all are serving, else why the first one could not load (then none runs)."""
        reasons = await asyncio.gather(*(self._start(worker) for worker in self.workers))
        refused = next((reason for reason in reasons if reason is not None), None)
        if refused is not None:
            await asyncio.gather(*(worker.kill() for worker in self.workers))
            return refused
        self._loops = [asyncio.create_task(self._serve(worker)) for worker in self.workers]
        return None

    async def _start(self, worker: WorkerProcess) -> str | None:
        self.starts += 1
        reason = await worker.start()
        if reason is None:
            self.ready_workers += 1
            self.on_change()
            log.info("%s: worker %d ready (pid %d)", self.model.name, worker.number, worker.pid)
        return reason

    async def _serve(self, worker: WorkerProcess) -> None:
        while True:
            batch = await self.batcher.next_batch()
            if not worker.alive():  # died while idle: its batch goes to the next worker free
                self.batcher.put_back(batch)
                await self._replace(worker)
                continue
            taken = time.monotonic()
            try:
                answers, samples = await worker.run(batch)
            except WorkerGone as err:
                self._answer_died(batch, worker, err)
                await self._replace(worker)
                continue
            for pending, (status, body) in zip(batch, answers):
                pending.settle(status, body)
            self._count(batch, taken, samples)

    def _count(self, batch: list[Pending], taken: float, samples: list) -> None:
        done = time.monotonic()
        self.metrics.batch_done(self.model.name, None, [taken - p.submitted_s for p in batch],
                                [done - p.submitted_s for p in batch], done - taken, samples)

    def _answer_died(self, batch: list[Pending], worker: WorkerProcess, gone: WorkerGone) -> None:
        """One line of the log saying which worker, what became of it and why; every request of its batch answered 503."""
        log.error("%s: worker %d (pid %s) %s a batch of %d (%s): answering 503, ending it and starting another",
                  self.model.name, worker.number, worker.pid, gone.what, len(batch), gone)
        body = broken_body(self.model.name) if isinstance(gone, WorkerBroken) else died_body(self.model.name)
        for pending in batch:
            pending.settle(DIED_STATUS, body)

    async def _replace(self, worker: WorkerProcess) -> None:
        self.deaths += 1
        self.ready_workers -= 1
        await worker.kill()
        self.on_change()
        while (reason := await self._start(worker)) is not None:
            log.error("%s: a new worker could not load (%s); trying again", self.model.name, reason)
            await asyncio.sleep(RESTART_PAUSE_S)

    async def stop(self, answer_waiting: bool = True) -> None:
        """Stop taking batches and end the workers; whatever still waits is answered 503 `server_stopping`."""
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        for pending in self.batcher.drain():
            pending.settle(503, stopping_body())
        await asyncio.gather(*(worker.kill() for worker in self.workers))

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.alive()]


class WorkerDied(RequestError):
    """The worker died (killed, out of memory) or broke (wire.BrokenMessage) while it held this request."""

    status = DIED_STATUS
    kind = "ServiceUnavailable"
    code = "worker_died"


def died_body(model: str) -> bytes:
    """The handler's error shape (handlers/tsvk/common/errors.py), encoded as the worker encodes answers."""
    return encode_body(WorkerDied(f"the worker serving {model} died with this request; it is being replaced: send it again").body())


def broken_body(model: str) -> bytes:
    """What a request of a broken worker's batch is answered: the same code as a death's, as the client's remedy is the same."""
    return encode_body(WorkerDied(f"the worker serving {model} failed with this request; it is being replaced: send it again").body())


def stopping_body() -> bytes:
    return encode_body(refusal().body())


def encode_body(value: dict) -> bytes:
    return json.dumps(value, indent=2).encode("utf-8")
