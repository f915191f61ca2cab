"""Batch workers on this machine: one process each (worker.py), fed tasks of a batch of inputs over a pipe,
answering one row per input. At most two tasks wait at each worker, so memory does not grow with the input.

A worker that dies (a segfault in a native library, the kernel's OOM killer) is started again; the inputs it
had not answered are sent again one at a time, and an input whose worker dies while scoring it alone gets a
500 `worker_died` row, as TorchServe answers a request whose worker died.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..errors import UsageError
from .fetch import InputError
from .scorer import WorkerSpec, row

TASKS_PER_WORKER = 2  # one being scored, one waiting: the worker never idles between batches
READY_TIMEOUT_S = 600.0


@dataclass
class Task:
    ids: list[int]
    sources: list[str]
    alone: bool = False  # sent again alone after its worker died
    answered: int = 0


@dataclass
class _Worker:
    number: int
    spec: WorkerSpec
    process: subprocess.Popen
    log: Path
    tasks: deque = field(default_factory=deque)
    buffer: bytes = b""


class LocalWorkers:
    """The worker processes of one run, started together and always stopped."""

    def __init__(self, specs: list[WorkerSpec], log_dir: Path):
        self.specs = specs
        self.log_dir = log_dir
        self.workers: list[_Worker] = []
        self.selector = selectors.DefaultSelector()
        self.retry: deque[Task] = deque()

    def __enter__(self) -> "LocalWorkers":
        try:
            for number, spec in enumerate(self.specs):
                self.workers.append(self._spawn(number, spec))
            for worker in self.workers:
                self._wait_ready(worker)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, tasks: Iterator[Task], write: Callable[[list[str]], None]) -> None:
        """Every task scored; `write` gets the rows as they come, in the order the workers answer."""
        pending = True
        while True:
            pending = self._fill(tasks) if pending else False
            if not pending and not self.retry and not any(w.tasks for w in self.workers):
                return
            for key, _ in self.selector.select(timeout=1.0):
                self._read(key.data, write)

    def close(self) -> None:
        for worker in self.workers:
            self._stop(worker)
        self.selector.close()

    def _fill(self, tasks: Iterator[Task]) -> bool:
        """Give each worker up to TASKS_PER_WORKER tasks, retries first; False once `tasks` is exhausted."""
        for worker in self.workers:
            while len(worker.tasks) < TASKS_PER_WORKER:
                task = self.retry.popleft() if self.retry else next(tasks, None)
                if task is None:
                    return False
                self._send(worker, task)
        return True

    def _send(self, worker: _Worker, task: Task) -> None:
        worker.tasks.append(task)
        worker.process.stdin.write((json.dumps({"ids": task.ids, "sources": task.sources}) + "\n").encode())
        worker.process.stdin.flush()

    def _read(self, worker: _Worker, write: Callable[[list[str]], None]) -> None:
        data = os.read(worker.process.stdout.fileno(), 1 << 20)
        if not data:
            self._restart(worker, write)
            return
        *lines, worker.buffer = (worker.buffer + data).split(b"\n")
        rows = []
        for line in lines:
            task = worker.tasks[0]
            task.answered += 1
            if task.answered == len(task.ids):
                worker.tasks.popleft()
            rows.append(line.decode())
        write(rows)

    def _restart(self, worker: _Worker, write: Callable[[list[str]], None]) -> None:
        """The worker died: its unanswered inputs go again one at a time, or fail where they were already alone."""
        code = worker.process.wait()
        self.selector.unregister(worker.process.stdout)
        failed = []
        for task in worker.tasks:
            for input_id, source in zip(task.ids[task.answered:], task.sources[task.answered:]):
                if task.alone:
                    failed.append(worker_died_row(input_id, source, code))
                else:
                    self.retry.append(Task([input_id], [source], alone=True))
        if failed:
            write(failed)
        print(f"tsvk batch: worker {worker.number} died (exit status {code}; log {worker.log}); starting it again",
              file=sys.stderr)
        fresh = self._spawn(worker.number, worker.spec)
        self._wait_ready(fresh)
        self.workers[self.workers.index(worker)] = fresh

    def _spawn(self, number: int, spec: WorkerSpec) -> _Worker:
        log = self.log_dir / f"worker-{number}.log"
        with open(log, "ab") as stderr:
            process = subprocess.Popen([sys.executable, "-m", "tsvk_tools.batch.worker", json.dumps(asdict(spec))],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=worker_env())
        return _Worker(number, spec, process, log)

    def _wait_ready(self, worker: _Worker) -> None:
        """Block until the worker has loaded the archive (its first line), or fail with its log's end."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        stream = worker.process.stdout
        while time.monotonic() < deadline:
            line = stream.readline()
            if line:
                if "ready" in json.loads(line):
                    self.selector.register(stream, selectors.EVENT_READ, worker)
                    return
            elif worker.process.poll() is not None:
                break
        tail = worker.log.read_text(errors="replace")[-2000:] if worker.log.exists() else ""
        raise UsageError(f"batch worker {worker.number} could not load the archive (log {worker.log}):\n{tail}")

    @staticmethod
    def _stop(worker: _Worker) -> None:
        if worker.process.poll() is None:
            try:
                worker.process.stdin.close()
                worker.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                worker.process.kill()
                worker.process.wait()


def worker_died_row(input_id: int, source: str, exit_status: int) -> str:
    died = InputError(500, "InternalServerError", "worker_died",
                      f"the worker died while scoring this input alone (exit status {exit_status})")
    return row(input_id, source, died.status, died.body())


def worker_env() -> dict[str, str]:
    """The workers' environment: ours, less a TorchServe config a shell may name (the scorer names its own)."""
    env = dict(os.environ)
    env.pop("TS_CONFIG_FILE", None)
    return env
