"""The messages between the server and a worker: length-prefixed pickles over a Unix socket pair.

Both ends are processes tsvk started from one installation, over a socket no other process holds, so pickle
carries no one else's bytes. A worker still runs the archive's code, which may break: the server reads no message
longer than its bound (checked before a byte of it is allocated), and takes what does not unpickle, or a batch's
answer of the wrong shape, as a broken worker (BrokenMessage) rather than failing itself. Kept to the standard
library: the worker imports this before the archive's tsvk.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct

HEADER = struct.Struct("!I")
READY = "ready"  # worker -> server, once: the service loaded ({"pid": ..., "log": ...})
REFUSED = "refused"  # worker -> server, once: why the archive cannot be served; the worker then exits
STATUSES = range(100, 600)  # what an answer's HTTP status may be
SAMPLE_KINDS = ("gauge", "counter")  # a handler metric sample's kind (metrics.RecordingMetrics)


class BrokenMessage(Exception):
    """The other end wrote bytes that are no message of this protocol, or the wrong message: its words say what."""


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


async def read_message(reader: asyncio.StreamReader, max_bytes: int) -> object | None:
    """`receive` for an asyncio stream: None at end of stream (the worker died, exited or closed its end, a message
    cut short included); BrokenMessage for a length over `max_bytes` (refused before it is read) or a payload
    that does not unpickle."""
    try:
        length = HEADER.unpack(await reader.readexactly(HEADER.size))[0]
        if length > max_bytes:
            raise BrokenMessage(f"a message of {length} bytes, over the {max_bytes} bytes a message may have")
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return _unpickled(body)


def _unpickled(body: bytes) -> object:
    try:
        return pickle.loads(body)
    except Exception as err:  # noqa: BLE001 - bytes that are no pickle raise any of a dozen types: each is a broken message
        raise BrokenMessage(f"a message that does not unpickle ({type(err).__name__})") from None


def said(message: object, word: str) -> bool:
    """Whether `message` is the one-word message (word, detail) a worker sends once: READY or REFUSED."""
    return isinstance(message, tuple) and len(message) == 2 and message[0] == word


def batch_answer(message: object, batch_id: int, size: int) -> tuple[list[tuple[int, bytes]], list]:
    """A worker's answer to the batch `batch_id` of `size` requests, checked before anything acts on it: its
    (status, body) per request and the handler's metric samples; BrokenMessage saying what is wrong."""
    if not isinstance(message, tuple) or len(message) != 3:
        raise BrokenMessage(f"a {type(message).__name__} where a batch's answer (batch id, answers, samples) was due")
    answered_id, answers, samples = message
    if not _is_number(answered_id) or answered_id != batch_id:
        raise BrokenMessage("an answer to another batch")
    if not isinstance(answers, list):
        raise BrokenMessage(f"a {type(answers).__name__} where a list of answers was due")
    if len(answers) != size:
        raise BrokenMessage(f"{len(answers)} answers to a batch of {size}")
    if not all(_is_answer(answer) for answer in answers):
        raise BrokenMessage("an answer that is not a (status, body bytes) pair")
    if not isinstance(samples, list) or not all(_is_sample(sample) for sample in samples):
        raise BrokenMessage("metric samples that are not (kind, name, value, labels)")
    return answers, samples


def _is_answer(answer: object) -> bool:
    return (isinstance(answer, tuple) and len(answer) == 2 and _is_number(answer[0]) and answer[0] in STATUSES
            and isinstance(answer[1], bytes))


def _is_sample(sample: object) -> bool:
    if not isinstance(sample, tuple) or len(sample) != 4:
        return False
    kind, name, value, labels = sample
    return (kind in SAMPLE_KINDS and isinstance(name, str) and _is_number(value, float) and isinstance(labels, tuple)
            and all(isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair) for pair in labels))


def _is_number(value: object, *kinds: type) -> bool:
    """An int (an HTTPStatus too), or one of `kinds`; never a bool."""
    return isinstance(value, (int, *kinds)) and not isinstance(value, bool)
