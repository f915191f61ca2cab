"""A body of declared length reaches the app as the objects the connection read, past the parser, on a real uvicorn
server of this process serving with tsvk's protocol (tools/oip/bounded_http.py); the requests after it, kept alive or
pipelined in the same bytes, are read as before, and a chunked body still goes through the parser."""

from __future__ import annotations

import hashlib
import json
import socket
import time

import pytest

from tests.support.bounded_server import bounded_server
from tsvk_tools.oip.connection_bounds import HttpBounds

BOUNDS = HttpBounds(body_timeout_s=1.0)
READS: list[bytes] = []  # every object the server's connections were handed by the socket


class _Digest:
    """Answers each body's length, SHA-256, and how many of its pieces are objects the socket read themselves."""

    async def __call__(self, scope, receive, send) -> None:
        pieces = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            pieces.append(message["body"])
            if not message.get("more_body"):
                break
        body = b"".join(pieces)
        unparsed = sum(any(piece is read for read in READS) for piece in pieces if piece)
        answer = json.dumps({"length": len(body), "sha": hashlib.sha256(body).hexdigest(), "unparsed": unparsed}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})


def _recording(bounded):
    """The bounded protocol, keeping every object the socket hands it in READS."""

    class Recording(bounded):
        def data_received(self, data: bytes) -> None:
            READS.append(data)
            super().data_received(data)

    return Recording


@pytest.fixture(scope="module")
def port():
    with bounded_server(_Digest(), BOUNDS, _recording) as port:
        yield port


def _request(body: bytes, path: str = "/digest") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)


def _answers(sock: socket.socket, count: int) -> list[dict]:
    """`count` answers read off `sock`, each a JSON body of declared length."""
    data, answers = b"", []
    while len(answers) < count:
        head, sep, rest = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]) if sep else -1
        if sep and len(rest) >= length:
            answers.append(json.loads(rest[:length]))
            data = rest[length:]
            continue
        chunk = sock.recv(1 << 16)
        assert chunk, f"the server closed the connection after {len(answers)} answer(s)"
        data += chunk
    return answers


def _expected(body: bytes) -> tuple[int, str]:
    return len(body), hashlib.sha256(body).hexdigest()


def test_the_rest_of_a_declared_body_reaches_the_app_as_the_objects_the_socket_read(port):
    body = bytes(range(256)) * 8192  # 2 MiB, sent in four writes apart
    request = _request(body)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for start in range(0, len(request), len(request) // 4 + 1):
            sock.sendall(request[start : start + len(request) // 4 + 1])
            time.sleep(0.05)
        (answer,) = _answers(sock, 1)
    assert (answer["length"], answer["sha"]) == _expected(body)
    assert answer["unparsed"] >= 3  # the writes after the one with the headers, however the kernel cut them


def test_requests_kept_alive_after_an_unparsed_body_are_read_by_a_fresh_parser(port):
    bodies = [b"a" * 300_000, b"", b"bc" * 70_000]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        answers = []
        for body in bodies:
            request = _request(body)
            sock.sendall(request[:1000])
            time.sleep(0.05)
            sock.sendall(request[1000:])
            answers += _answers(sock, 1)
    assert [(a["length"], a["sha"]) for a in answers] == [_expected(body) for body in bodies]


def test_a_request_pipelined_in_the_same_bytes_as_a_body_s_end_is_answered_after_it(port):
    first, second = b"x" * 200_000, b"y" * 5000
    request = _request(first)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request[:500])
        time.sleep(0.05)
        sock.sendall(request[500:] + _request(second))
        answers = _answers(sock, 2)
    assert [(a["length"], a["sha"]) for a in answers] == [_expected(first), _expected(second)]


def test_a_chunked_body_is_still_read_by_the_parser(port):
    parts = [b"p" * 100_000, b"q" * 3]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    head = b"POST /digest HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + chunked[:50_000])
        time.sleep(0.05)
        sock.sendall(chunked[50_000:])
        (answer,) = _answers(sock, 1)
    assert (answer["length"], answer["sha"]) == _expected(b"".join(parts))
    assert answer["unparsed"] == 0


def test_a_body_that_stops_past_the_parser_is_closed_within_the_body_bound(port):
    request = _request(b"z" * 100_000)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request[:1000])
        time.sleep(0.05)
        sock.sendall(request[1000:60_000])
        started = time.monotonic()
        sock.settimeout(5)
        assert sock.recv(1 << 16) == b""  # closed, nothing answered
        assert time.monotonic() - started < BOUNDS.body_timeout_s + 1.0
