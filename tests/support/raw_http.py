"""A client for the requests the `requests` library will not send the way a hostile client does: a chunked body of any
size on any method, sent as a well-behaved client sends a large upload (it stops once the server has answered, as
curl does), so that an early 413 is read rather than lost to the reset of a connection the server closed."""

from __future__ import annotations

import http.client
import select
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # the body bytes the client wrote before the server answered


def send_chunked(url: str, method: str, path: str, headers: dict[str, str], total: int, chunk: int = 64 * 1024) -> RawAnswer:
    """`total` bytes sent as `Transfer-Encoding: chunked` in `chunk`-sized pieces, stopping when the answer arrives."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        head = [f"{method} {path} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}", "Transfer-Encoding: chunked",
                *(f"{name}: {value}" for name, value in headers.items())]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        sent = _send_chunks(sock, total, chunk)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return RawAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read(), sent)


def _send_chunks(sock: socket.socket, total: int, chunk: int) -> int:
    """The chunks and the last (empty) one; the count sent, up to the point the server answered or closed."""
    sent, piece = 0, b"\xff" * chunk
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:  # the server has answered (or closed): stop sending
                return sent
            size = min(chunk, total - sent)
            sock.sendall(f"{size:x}\r\n".encode() + piece[:size] + b"\r\n")
            sent += size
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent
