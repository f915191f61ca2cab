"""Closing a listener from outside its owner (tools/engines/shared/listeners.py), on real sockets of this process: a
connection the kernel completed before the close is accepted and answered, not reset; one that comes after is
refused; the kernel's tables say what waits in an accept queue and which connections hold unread bytes."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tsvk_tools.engines.shared import listeners
from tsvk_tools.engines.shared.drain import DrainReport, describe_drain
from tsvk_tools.engines.shared.listeners import (NOT_CLOSED, ListenersClosed, client_listeners, stop_accepting, unread_connections,
                                          waiting_to_be_accepted)


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server
    server.close()


def _port(sock: socket.socket) -> int:
    return sock.getsockname()[1]


def _accept_later(server: socket.socket, delay_s: float, accepted: list) -> threading.Thread:
    """The frontend's event loop, busy for `delay_s` before it accepts what waits."""
    def accept() -> None:
        time.sleep(delay_s)
        try:
            accepted.append(server.accept()[0])
        except OSError as err:
            accepted.append(err)
    thread = threading.Thread(target=accept)
    thread.start()
    return thread


def _connect_result(port: int, results: list) -> threading.Thread:
    def connect() -> None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            results.append("connected")
        except OSError as err:
            results.append(type(err).__name__)
    thread = threading.Thread(target=connect)
    thread.start()
    return thread


def test_a_connection_waiting_to_be_accepted_is_accepted_and_answered_then_new_ones_are_refused(listener):
    port = _port(listener)
    waiting = socket.create_connection(("127.0.0.1", port))
    waiting.sendall(b"POST /predictions/m")
    assert waiting_to_be_accepted(os.getpid(), {port}) == 1
    accepted, late = [], []
    acceptor = _accept_later(listener, 0.5, accepted)
    threading.Timer(0.1, lambda: _connect_result(port, late)).start()  # a new client while the stop runs

    assert stop_accepting(os.getpid(), client_listeners(os.getpid(), kept_ports=())) == ListenersClosed(True, True)
    acceptor.join()
    assert isinstance(accepted[0], socket.socket), accepted  # shut at once, the kernel would have reset it
    with accepted[0] as connection:
        assert connection.recv(64) == b"POST /predictions/m"
        connection.sendall(b"200")
    assert waiting.recv(8) == b"200"
    waiting.close()
    deadline = time.monotonic() + 10
    while not late and time.monotonic() < deadline:
        time.sleep(0.05)
    assert late == ["ConnectionRefusedError"]  # held back by the filter, then refused: never half accepted
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_kept_ports_stay_open(listener):
    assert client_listeners(os.getpid(), kept_ports={_port(listener)}) == {}
    assert stop_accepting(os.getpid(), {}) == NOT_CLOSED
    socket.create_connection(("127.0.0.1", _port(listener))).close()


def test_a_connection_holding_bytes_not_yet_read_is_counted_until_they_are_read(listener):
    client = socket.create_connection(("127.0.0.1", _port(listener)))
    server_side = listener.accept()[0]
    assert unread_connections(os.getpid(), {_port(listener)}) == 0  # an idle kept-alive connection holds nothing
    client.sendall(b"GET /ping")
    deadline = time.monotonic() + 5
    while not unread_connections(os.getpid(), {_port(listener)}) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert unread_connections(os.getpid(), {_port(listener)}) == 1
    server_side.recv(64)
    assert unread_connections(os.getpid(), {_port(listener)}) == 0
    client.close()
    server_side.close()


def test_where_the_kernel_refuses_the_filter_the_listener_is_still_shut_and_the_stop_says_so(listener, monkeypatch):
    monkeypatch.setattr(listeners, "_refuse_new_handshakes", lambda sock: False)  # EPERM, as in podman containers here
    closed = stop_accepting(os.getpid(), client_listeners(os.getpid(), kept_ports=()))
    assert closed == ListenersClosed(refusing=True, queue_accepted=False)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", _port(listener)), timeout=5)
    said = describe_drain(DrainReport(True, 0.5, 0, stopped_accepting=True, queue_accepted=False))
    assert "shut at once" in said and "reset" in said
