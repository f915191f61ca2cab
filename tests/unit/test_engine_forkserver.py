"""The kserve engine's fork server (tools/engines/kserve/forkserver.py), a real process forking real workers: each
worker gets its arguments, socket, log, folder and environment, starts with the libraries already imported but not
tsvk, is the fork server's child, is killed on request, and the fork server ends every worker it still has when the
engine lets it go."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import pytest

from tsvk_tools.engines.kserve.forkserver import ForkServer
from tsvk_tools.engines.kserve.pool import ForkedWorker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def forks(tmp_path):
    server = ForkServer.start("tests.support.fork_echo", tmp_path / "forks.log", {**os.environ, "FORK_ECHO": "server"}, ROOT)
    yield server
    server.close()


def fork_one(forks: ForkServer, tmp_path: Path, *extra: str) -> tuple[int, socket.socket]:
    ours, theirs = socket.socketpair()
    with open(tmp_path / "worker.log", "ab") as log, theirs:
        pid = forks.fork(["--name", "w0", *extra], {"FORK_ECHO": "worker"}, tmp_path, theirs.fileno(), log.fileno())
    ours.settimeout(120)
    return pid, ours


def read_report(sock: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the worker closed its socket without a report"
        data += chunk
    return json.loads(data)


def test_a_forked_worker_gets_its_arguments_socket_log_folder_and_environment(forks, tmp_path):
    pid, sock = fork_one(forks, tmp_path)
    report = read_report(sock)
    assert report["argv"][:2] == ["--name", "w0"] and report["argv"][2] == "--fd"
    assert report["cwd"] == str(tmp_path) and report["env"] == "worker"
    assert report["ppid"] == forks.pid
    assert report["preloaded"] is True, "the worker imported numpy itself: nothing was preloaded"
    assert report["tsvk"] is False, "the fork server imported tsvk: the archive's own copy would not load"
    deadline = time.monotonic() + 30
    while f"worker {pid} writes to its log" not in (tmp_path / "worker.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"worker {pid} writes to its log" in (tmp_path / "worker.log").read_text()


async def _killed(worker: ForkedWorker) -> None:
    worker.kill()
    await worker.wait()


def test_a_worker_is_killed_on_request_and_the_rest_end_with_the_fork_server(forks, tmp_path):
    first, first_socket = fork_one(forks, tmp_path, "--stay")
    second, second_socket = fork_one(forks, tmp_path, "--stay")
    for sock in (first_socket, second_socket):
        read_report(sock)
    worker = ForkedWorker(forks, first)
    assert worker.alive() and forks.is_running_child(second)
    asyncio.run(_killed(worker))
    assert not worker.alive()
    assert first_socket.recv(1) == b"", "the killed worker's socket is still open"
    forks.close()
    assert forks.process.returncode == 0
    assert not forks.is_running_child(second)
    assert second_socket.recv(1) == b"", "a worker outlived its fork server"
