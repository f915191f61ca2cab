"""The messages between the server and a worker: length-prefixed pickles over a Unix socket pair.

Both ends are processes tsvk started from one installation, over a socket no other process holds, so pickle
carries no one else's bytes. Kept to the standard library: the worker imports this before the archive's tsvk.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct

HEADER = struct.Struct("!I")
READY = "ready"  # worker -> server, once: the service loaded ({"pid": ..., "log": ...})
REFUSED = "refused"  # worker -> server, once: why the archive cannot be served; the worker then exits


def pack(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def send(sock: socket.socket, message: object) -> None:
    sock.sendall(pack(message))


def receive(sock: socket.socket) -> object | None:
    """The next message, or None once the other end has closed the socket."""
    header = _exactly(sock, HEADER.size)
    if header is None:
        return None
    body = _exactly(sock, HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


async def read_message(reader) -> object | None:
    """`receive` for an asyncio stream: None at end of stream (the worker died or exited)."""
    try:
        header = await reader.readexactly(HEADER.size)
        return pickle.loads(await reader.readexactly(HEADER.unpack(header)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
