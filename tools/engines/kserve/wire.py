"""The messages between the server and a worker: framed pickles over a Unix socket pair, a large value beside its pickle.

Both ends are processes tsvk started from one installation, over a socket no other process holds, so pickle
carries no one else's bytes. A worker still runs the archive's code, which may break: the server reads no message
longer than its bound (checked before a byte of it is allocated), and takes what does not unpickle, or a batch's
answer of the wrong shape, as a broken worker (BrokenMessage) rather than failing itself. Kept to the standard
library: the worker imports this before the archive's tsvk.

A frame is its header (the pickle's length, how many buffers follow), each buffer's length, the pickle, then the
buffers. A photo of a batch travels as a buffer, not inside the pickle (the pickler's persistent ids stand in for
it): the server hands the kernel the very bytes the request's body was read into, with no copy of its own, and the
worker receives them straight into the `bytearray` its handler gets (what TorchServe's worker hands a handler for a
raw body). Pickling a 4 MB body instead copied it twice in the server (into the pickle, then into the stream's write
buffer) and once more in the worker.
"""

from __future__ import annotations

import asyncio
import io
import pickle
import socket
import struct

HEADER = struct.Struct("!II")  # the pickle's length, how many buffers follow it
BUFFER_LENGTH = struct.Struct("!Q")
OUT_OF_BAND_BYTES = 64 * 1024  # a bytes value at least this long goes beside the pickle, in a batch the server sends
MAX_BUFFERS = 4096  # buffers one frame may carry (a batch's bodies and form fields)
READY = "ready"  # worker -> server, once: the service loaded ({"pid": ..., "log": ...})
REFUSED = "refused"  # worker -> server, once: why the archive cannot be served; the worker then exits
STATUSES = range(100, 600)  # what an answer's HTTP status may be
SAMPLE_KINDS = ("gauge", "counter")  # a handler metric sample's kind (metrics.RecordingMetrics)


class BrokenMessage(Exception):
    """The other end wrote bytes that are no message of this protocol, or the wrong message: its words say what."""


class Body:
    """A request body as the server's socket read it, in pieces: one value to the worker (a bytearray there), sent
    piece after piece so that the server never joins them into a copy of its own."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces
        self.size = sum(len(piece) for piece in pieces)


class _Framer(pickle.Pickler):
    """Pickles a message, setting aside as a buffer each Body and each bytes value of at least `out_of_band` bytes."""

    def __init__(self, out: io.BytesIO, out_of_band: int | None):
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.out_of_band = out_of_band
        self.buffers: list[Body] = []

    def persistent_id(self, value: object) -> int | None:
        if isinstance(value, Body):
            self.buffers.append(value)
        elif self.out_of_band is not None and type(value) is bytes and len(value) >= self.out_of_band:
            self.buffers.append(Body([value]))
        else:
            return None
        return len(self.buffers) - 1


class _Unframer(pickle.Unpickler):
    """Unpickles a message, putting each buffer back where its number stands."""

    def __init__(self, data: bytes | bytearray, buffers: list[bytearray]):
        super().__init__(io.BytesIO(data))
        self.buffers = buffers

    def persistent_load(self, number: object) -> bytearray:
        if type(number) is not int or not 0 <= number < len(self.buffers):
            raise pickle.UnpicklingError(f"no buffer {number!r} in this frame")
        return self.buffers[number]


def frame(message: object, out_of_band: int | None = None) -> list[bytes]:
    """`message` as the pieces to send in order: the header and pickle, then each buffer's pieces as they lie (never
    copied into the pickle). A buffer is each Body, and with `out_of_band` each bytes value at least that long."""
    out = io.BytesIO()
    framer = _Framer(out, out_of_band)
    framer.dump(message)
    data = out.getvalue()
    lengths = b"".join(BUFFER_LENGTH.pack(buffer.size) for buffer in framer.buffers)
    return [HEADER.pack(len(data), len(framer.buffers)) + lengths + data, *(p for buffer in framer.buffers for p in buffer.pieces)]


def pack(message: object) -> bytes:
    """A frame of `message` with everything inside its pickle, as one piece."""
    return frame(message)[0]


def send(sock: socket.socket, message: object) -> None:
    """Send a worker's message to the server (its answers go inside the pickle: they are small)."""
    sock.sendall(pack(message))


async def send_batch(sock: socket.socket, message: object) -> None:
    """Send a batch to a worker from the server's event loop, each large body beside the pickle, uncopied."""
    loop = asyncio.get_running_loop()
    for piece in frame(message, OUT_OF_BAND_BYTES):
        await loop.sock_sendall(sock, piece)


def receive(sock: socket.socket) -> object | None:
    """The next message (each buffer received into a bytearray of its own), or None once the other end has closed."""
    header = _exactly(sock, HEADER.size)
    if header is None:
        return None
    length, count = HEADER.unpack(header)
    lengths = _exactly(sock, count * BUFFER_LENGTH.size)
    if lengths is None:
        return None
    parts = [_exactly(sock, size) for size in [length, *_sizes(lengths)]]
    if any(part is None for part in parts):
        return None
    return _Unframer(parts[0], parts[1:]).load()


def _exactly(sock: socket.socket, size: int) -> bytearray | None:
    """`size` bytes received straight into one bytearray, or None where the stream ends first."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        received = sock.recv_into(view[got:])
        if not received:
            return None
        got += received
    return buffer


def _sizes(lengths: bytes | bytearray) -> list[int]:
    """The buffers' lengths, as the frame's header lists them."""
    return [size for (size,) in BUFFER_LENGTH.iter_unpack(lengths)]


async def read_message(sock: socket.socket, max_bytes: int) -> object | None:
    """`receive` on the server's event loop: None at end of stream (the worker died, exited or closed its end, a
    message cut short included); BrokenMessage for a frame over `max_bytes` (refused before its pickle or any buffer
    is read) or a payload that does not unpickle."""
    loop = asyncio.get_running_loop()
    try:
        header = await _read_exactly(loop, sock, HEADER.size)
        if header is None:
            return None
        length, count = HEADER.unpack(header)
        if count > MAX_BUFFERS:
            raise BrokenMessage(f"a message of {count} buffers, over the {MAX_BUFFERS} a message may have")
        lengths = await _read_exactly(loop, sock, count * BUFFER_LENGTH.size)
        if lengths is None:
            return None
        sizes = _sizes(lengths)
        total = length + sum(sizes)
        if total > max_bytes:
            raise BrokenMessage(f"a message of {total} bytes, over the {max_bytes} bytes a message may have")
        parts = [await _read_exactly(loop, sock, size) for size in [length, *sizes]]
    except ConnectionError:
        return None
    if any(part is None for part in parts):
        return None
    return _unpickled(parts[0], parts[1:])


async def _read_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytearray | None:
    """`_exactly` on the event loop."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        received = await loop.sock_recv_into(sock, view[got:])
        if not received:
            return None
        got += received
    return buffer


def _unpickled(data: bytearray, buffers: list[bytearray]) -> object:
    try:
        return _Unframer(data, buffers).load()
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
