"""tsvk's own engine against slow and idle clients, its bounds set small in the served config: a connection that never
sends a request, headers sent a byte at a time, a body that stops, an idle keep-alive connection are each closed
once their bound has passed; headers over the size or count bound are answered 431, and requests while more
connections are open than the bound 503, both in tsvk's error shape; the gRPC server's bounds are the config's too.
After each, the engine answers a good request. uvicorn alone would hold the first three until it stops.
"""

from __future__ import annotations

import json
import socket
import time
import pytest
import requests

from tests.support.engine import running_engine
from tests.support.torchserve import archive_tiny
from tsvk_tools.errors import UsageError
from tsvk_tools.config.ports import free_ports, serving_on_free_ports

pytestmark = pytest.mark.integration

MODEL = "tiny"
HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 2.0
KEEP_ALIVE_S = 3.0
MAX_CONNECTIONS = 20
MAX_HEADERS = 30
MAX_HEADER_BYTES = 4096
GRPC_HANDSHAKE_TIMEOUT_S = 2.0  # the default is 10 s: a close within 2-5 s is the config's bound
LATE_S = 2.5  # how much later than its bound a close may come on a busy 2-vCPU machine
BOUNDS = {
    "tsvk.http.header_timeout_s": HEADER_TIMEOUT_S,
    "tsvk.http.body_timeout_s": BODY_TIMEOUT_S,
    "tsvk.http.keep_alive_s": KEEP_ALIVE_S,
    "tsvk.http.max_connections": MAX_CONNECTIONS,
    "tsvk.http.max_headers": MAX_HEADERS,
    "tsvk.http.max_header_bytes": MAX_HEADER_BYTES,
    "tsvk.grpc.handshake_timeout_s": GRPC_HANDSHAKE_TIMEOUT_S,
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    store = archive_tiny(tmp_path_factory.mktemp("slow_store") / "model_store")
    rest_port, grpc_port = free_ports(2)
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=1, max_batch_delay_ms=10, auth=True,
                                    protocol="oip", oip_rest_port=rest_port, oip_grpc_port=grpc_port)
    with running_engine(request, tmp_path_factory.mktemp("slow_engine"), extra_properties={k: str(v) for k, v in BOUNDS.items()}) as run:
        yield run


def _address(run) -> tuple[str, int]:
    host, port = run.url("inference").removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _connect(run) -> socket.socket:
    return socket.create_connection(_address(run), timeout=30)


def _ping(run, extra: str = "") -> bytes:
    auth = "".join(f"{k}: {v}\r\n" for k, v in run.headers("inference").items())
    return f"GET /ping HTTP/1.1\r\nHost: x\r\n{auth}{extra}\r\n".encode()


def _until_closed(connection: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and the seconds that took."""
    began, received = time.monotonic(), b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received, time.monotonic() - began


def _whole_answer(connection: socket.socket) -> bytes:
    """One answer, read to the end of its body (its head and body may come in pieces)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def _answer(received: bytes) -> tuple[int, dict]:
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def _assert_still_serving(run) -> None:
    assert requests.get(f"{run.url('inference')}/ping", headers=run.headers("inference"), timeout=30).status_code == 200


def test_a_connection_that_never_sends_a_request_is_closed_after_the_header_timeout(engine):
    with _connect(engine) as connection:
        received, seconds = _until_closed(connection)
    assert received == b"" and HEADER_TIMEOUT_S - 0.5 < seconds < HEADER_TIMEOUT_S + LATE_S, seconds
    _assert_still_serving(engine)


def test_headers_sent_a_byte_at_a_time_are_answered_408_after_the_header_timeout(engine):
    with _connect(engine) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        began = time.monotonic()
        for _ in range(int(HEADER_TIMEOUT_S / 0.5) + 8):  # past the bound, each byte within it of the last
            time.sleep(0.5)
            try:
                connection.sendall(b"a")
            except OSError:
                break
        received, _ = _until_closed(connection)
    seconds = time.monotonic() - began
    status, body = _answer(received)
    assert (status, body["error"], body["source"]) == (408, "request_timeout", "tsvk"), body
    assert "tsvk.http.header_timeout_s" in body["message"] and seconds < HEADER_TIMEOUT_S + LATE_S, seconds
    _assert_still_serving(engine)


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(engine):
    with _connect(engine) as connection:
        connection.sendall(_ping(engine))
        answer = _whole_answer(connection)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        received, seconds = _until_closed(connection)
    assert received == b"" and KEEP_ALIVE_S - 0.5 < seconds < KEEP_ALIVE_S + LATE_S, seconds


def test_a_body_that_stops_arriving_is_closed_after_the_body_timeout(engine):
    with _connect(engine) as connection:
        auth = "".join(f"{k}: {v}\r\n" for k, v in engine.headers("inference").items())
        connection.sendall(f"POST /predictions/{MODEL} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 100000\r\n\r\n".encode() + b"\xff" * 10)
        received, seconds = _until_closed(connection)
    assert received == b"" and BODY_TIMEOUT_S - 0.5 < seconds < BODY_TIMEOUT_S + LATE_S, seconds
    _assert_still_serving(engine)


@pytest.mark.parametrize("extra,says", [
    ("X-Big: " + "a" * (2 * MAX_HEADER_BYTES) + "\r\n", f"over {MAX_HEADER_BYTES}"),
    ("".join(f"X-{i}: a\r\n" for i in range(MAX_HEADERS + 1)), f"over {MAX_HEADERS} header fields"),
])
def test_headers_over_the_size_or_count_bound_are_answered_431(engine, extra, says):
    with _connect(engine) as connection:
        connection.sendall(_ping(engine, extra))
        received, _ = _until_closed(connection)
    status, body = _answer(received)
    assert (status, body["error"], body["source"]) == (431, "headers_too_large", "tsvk"), body
    assert says in body["message"], body["message"]
    _assert_still_serving(engine)


def test_requests_while_more_connections_are_open_than_the_bound_are_answered_503(engine):
    held = [_connect(engine) for _ in range(MAX_CONNECTIONS)]
    try:
        with _connect(engine) as connection:
            connection.sendall(_ping(engine))
            received, _ = _until_closed(connection)
    finally:
        for connection in held:
            connection.close()
    status, body = _answer(received)
    assert (status, body["error"], body["source"]) == (503, "too_many_connections", "tsvk"), body
    assert b"retry-after: 1" in received.lower() and "tsvk.http.max_connections" in body["message"]
    time.sleep(0.5)  # the held connections' closes reach the server
    _assert_still_serving(engine)


def test_the_grpc_server_closes_a_connection_that_never_says_http2_after_the_config_s_handshake_timeout(engine):
    host, port = engine.oip_urls()[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        received, seconds = _until_closed(connection)
    assert GRPC_HANDSHAKE_TIMEOUT_S - 0.5 < seconds < GRPC_HANDSHAKE_TIMEOUT_S + LATE_S, (seconds, received[:100])


def test_a_bound_the_engine_cannot_read_stops_it_from_starting(tmp_path):
    store = archive_tiny(tmp_path / "model_store")
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=1, max_batch_delay_ms=10, auth=False)
    with pytest.raises(UsageError, match="tsvk.http.header_timeout_s must be a positive number, got '-1'"):
        with running_engine(request, tmp_path / "engine", timeout=60, extra_properties={"tsvk.http.header_timeout_s": "-1"}):
            pass
