"""A process that imports the libraries every worker needs once, then forks the workers from itself.

Each worker used to start a fresh interpreter and import torch (seconds of CPU, and about 370 MiB of pages that
the dynamic loader dirties relocating torch's libraries, the same in every worker, yet private to each). Forked from
a process that has already imported them, a worker starts with those imports done, and its pages are shared with
every other worker until written: cold start loses the imports, and the whole server's memory counts them once.

Only third-party libraries are imported here, never `tsvk`: the worker must still import the archive's own copy of
it (worker.py checks where it came from). The fork server holds nothing else: no thread, no model, no tensor
computed, so a fork copies no lock held by another thread and no OpenMP pool. Its garbage collector is off (as
Python's `gc.freeze` documentation advises for a parent that forks without exec): the imports run faster, and the
objects they made are frozen before the first fork; each worker turns collection back on.

The server (pool.py) talks to it over a SOCK_SEQPACKET socket pair (one pickle a message, file descriptors beside
it): ("start", argv, env, cwd) with the worker's socket and log as descriptors is answered ("started", pid) or
("failed", why); ("kill", pid) kills a worker it forked and has not yet reaped (so never a reused pid). When the
server's end closes, the fork server kills the workers it still has and exits. Only its own children are signalled.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable

# What every worker imports, none of it tsvk: the archive's service (its CPU preprocessing uses torchvision's
# transforms.v2) and worker.py (PyYAML reads the archive's model-config.yaml).
PRELOAD = ("numpy", "PIL.Image", "yaml", "torch", "torchvision", "torchvision.transforms.v2")
FLAG = "--fork-server"  # worker.py's command line in this mode; the forked workers keep it (and so the worker marker)
MESSAGE_BYTES = 1 << 20  # the largest control message: argv, environment and folder of one worker
REAP_S = 0.2  # how often exited workers are reaped while no request comes
REPLY_TIMEOUT_S = 600.0  # the first start waits for the imports above
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


# ----- the fork server's own process -----

def serve_forks(control: socket.socket, run_worker: Callable[[list[str]], int]) -> int:
    """Import PRELOAD, then fork a worker running `run_worker(argv)` for each start request, until the server goes.
    A stop signal to the engine's process group is the server's to act on: the fork server waits for the server to
    close its socket (it then ends the workers it still has), as the workers wait for theirs."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    gc.disable()  # the imports make millions of objects and free few: collections during them are a fifth of their time
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    gc.freeze()  # the imports' objects move out of the collector's reach: it will not write (and so copy) their pages
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([control], [], [], REAP_S)
        _reap(children)
        if not ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, MESSAGE_BYTES, 2)
        if not message:
            break
        request = pickle.loads(message)
        if request[0] == "start":
            control.send(pickle.dumps(_start(request[1:], fds, control, run_worker, children)))
        elif request[0] == "kill" and request[1] in children:
            os.kill(request[1], signal.SIGKILL)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    return 0


def _start(request: tuple, fds: list[int], control: socket.socket, run_worker: Callable, children: set[int]) -> tuple:
    """Fork one worker with its socket and log; the reply the server waits for."""
    argv, env, cwd = request
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return ("failed", f"expected the worker's socket and log, got {len(fds)} descriptor(s)")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_worker(argv, env, cwd, fds, control, run_worker)
    for fd in fds:
        os.close(fd)
    children.add(pid)
    return ("started", pid)


def _become_worker(argv: list[str], env: dict, cwd: str, fds: list[int], control: socket.socket, run_worker: Callable) -> None:
    """In the forked child: the worker's output, folder and environment, then the worker itself; never returns."""
    code = 1
    try:
        control.close()
        gc.enable()  # off in the fork server only (its imports); a worker collects as any process does
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a worker starts with the signals a fresh interpreter has
        signal.signal(signal.SIGINT, signal.default_int_handler)
        worker_socket, log = fds
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        code = run_worker([*argv, "--fd", str(worker_socket)])
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's own failure: said in its log, then its exit status
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code or 0)


def _reap(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                continue
        children.discard(pid)


# ----- the server's side -----

def worker_env(config: Path) -> dict[str, str]:
    """The workers' environment: this one, with the config named the way an archive's tsvk looks for it first."""
    return {**os.environ, "TS_CONFIG_FILE": str(config), "PYTHONUNBUFFERED": "1"}


class ForkServer:
    """The engine's handle on its fork server: start it, ask it for workers, end it."""

    def __init__(self, process: subprocess.Popen, control: socket.socket):
        self.process = process
        self.control = control
        self.lock = threading.Lock()

    @classmethod
    def start(cls, worker_module: str, log: Path, env: dict[str, str], cwd: Path) -> ForkServer:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "ab") as out, theirs:
            process = subprocess.Popen([sys.executable, "-m", worker_module, FLAG, "--fd", str(theirs.fileno())],
                                       stdout=out, stderr=out, pass_fds=(theirs.fileno(),), env=env, cwd=cwd)
        return cls(process, ours)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, argv: list[str], env: dict[str, str], cwd: Path, worker_socket: int, log: int) -> int:
        """A new worker's pid; OSError when the fork server cannot start one (it is gone, or refused)."""
        with self.lock:
            socket.send_fds(self.control, [pickle.dumps(("start", argv, env, str(cwd)))], [worker_socket, log])
            self.control.settimeout(REPLY_TIMEOUT_S)
            reply = self.control.recv(MESSAGE_BYTES)
        if not reply:
            raise OSError("the fork server exited")
        answer = pickle.loads(reply)
        if answer[0] != "started":
            raise OSError(answer[1])
        return answer[1]

    def kill(self, pid: int) -> None:
        with self.lock, contextlib.suppress(OSError):
            self.control.send(pickle.dumps(("kill", pid)))

    def is_running_child(self, pid: int) -> bool:
        """Whether `pid` is a worker of ours that runs: the fork server's child, not yet exited."""
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        return fields[0] not in ("Z", "X") and int(fields[1]) == self.pid

    def close(self, timeout: float = 10.0) -> None:
        """End the fork server: it kills the workers it still has, then exits."""
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
