"""A client for the requests the `requests` library will not send the way a hostile client does: a body of any size on
any method in any framing (chunked, a declared Content-Length, or no length at all on an HTTP/1.0 connection that the
client closes), sent as a well-behaved client sends a large upload: it stops once the server has answered, as curl
does, so that an early 413 is read rather than lost to the reset of a connection the server closed."""

from __future__ import annotations

import http.client
import select
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

CHUNKED, DECLARED, UNFRAMED = "chunked", "content-length", "no length"
FRAMINGS = (CHUNKED, DECLARED, UNFRAMED)
PIECE = 64 * 1024  # bytes written at a time: the client looks for an answer between pieces
NO_ANSWER = 0  # the status of a connection the server closed without an HTTP answer


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # the body bytes the client wrote before the server answered


def send_chunked(url: str, method: str, path: str, headers: dict[str, str], total: int, chunk: int = PIECE) -> RawAnswer:
    """`total` bytes sent as `Transfer-Encoding: chunked` in `chunk`-sized pieces, stopping when the answer arrives."""
    return send_body(url, method, path, headers, total, CHUNKED, chunk)


def send_body(url: str, method: str, path: str, headers: dict[str, str], total: int, framing: str, piece: int = PIECE,
              timeout_s: float = 60.0, content: bytes | None = None) -> RawAnswer:
    """`total` bytes of body in `framing` (one of FRAMINGS), stopping when the server answers or closes: filler bytes,
    or `content` (a real upload, a photo; `total` is then its length) so that a server that reads it whole can answer."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing must be one of {', '.join(FRAMINGS)}, got {framing!r}")
    if content is not None and total != len(content):
        raise ValueError(f"total must be the content's length ({len(content)}), got {total}")
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.sendall(_head(method, path, parts, headers, total, framing))
        sent = _send_pieces(sock, total, piece, chunked=framing == CHUNKED, content=content)
        if framing == UNFRAMED:
            _shut_write(sock)  # the body ends where the client stops writing
        return _read_answer(sock, sent)


def _head(method: str, path: str, parts, headers: dict[str, str], total: int, framing: str) -> bytes:
    version = "HTTP/1.0" if framing == UNFRAMED else "HTTP/1.1"
    framing_header = {CHUNKED: "Transfer-Encoding: chunked", DECLARED: f"Content-Length: {total}", UNFRAMED: "Connection: close"}
    head = [f"{method} {path} {version}", f"Host: {parts.hostname}:{parts.port}", framing_header[framing],
            *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


def _send_pieces(sock: socket.socket, total: int, piece: int, chunked: bool, content: bytes | None = None) -> int:
    """The body (and, chunked, its last empty chunk); the count sent, up to the point the server answered or closed."""
    sent, filler = 0, b"\xff" * piece
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:  # the server has answered (or closed): stop sending
                return sent
            size = min(piece, total - sent)
            data = filler[:size] if content is None else content[sent:sent + size]
            sock.sendall(f"{size:x}\r\n".encode() + data + b"\r\n" if chunked else data)
            sent += size
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _shut_write(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:  # the server has closed already
        pass


def _read_answer(sock: socket.socket, sent: int) -> RawAnswer:
    response = http.client.HTTPResponse(sock)
    try:
        response.begin()
        return RawAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read(), sent)
    except (http.client.HTTPException, ConnectionError, socket.timeout):
        return RawAnswer(NO_ANSWER, {}, b"", sent)
