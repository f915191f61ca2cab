"""The worker channel (tools/engines/kserve/wire.py), over real socket pairs: a frame over the bound is refused
before a byte of its pickle or buffers is awaited, bytes that do not unpickle are a broken message, a message cut short
is the end of the stream, a batch's photos travel beside the pickle as the very objects the server holds and arrive
as one bytearray each, and a batch's answer is checked for its batch, one (status, body) per request and well-formed
metric samples before the server acts on it. The engine's own handling (503, the worker replaced) is
tests/integration/test_engine_worker_faults.py's."""

from __future__ import annotations

import asyncio
import pickle
import socket
import threading

import pytest

from tsvk_tools.engines.kserve import wire

BOUND = 1024
SAMPLE = ("counter", "TsvkRequests", 1.0, (("ModelName", "tiny"),))
PHOTO = bytes(range(256)) * 1024  # 256 KiB: past wire.OUT_OF_BAND_BYTES


def _read(data: bytes, end: bool = True, bound: int = BOUND):
    """What read_message makes of `data` sent on a socket pair (then the end of the stream, unless `end` is False),
    within 5 s."""
    ours, theirs = socket.socketpair()
    theirs.sendall(data)
    if end:
        theirs.shutdown(socket.SHUT_WR)

    async def scenario():
        ours.setblocking(False)
        return await asyncio.wait_for(wire.read_message(ours, bound), 5)

    try:
        return asyncio.run(scenario())
    finally:
        ours.close()
        theirs.close()


def _sent_batch(message) -> object:
    """`message` sent as the server sends a batch (send_batch) and received as the worker receives it."""
    ours, theirs = socket.socketpair()
    received = []
    reader = threading.Thread(target=lambda: received.append(wire.receive(theirs)))
    reader.start()

    async def send():
        ours.setblocking(False)
        await wire.send_batch(ours, message)

    asyncio.run(send())
    reader.join(5)
    ours.close()
    theirs.close()
    return received[0]


def test_a_message_within_the_bound_is_read():
    assert _read(wire.pack((3, [(200, b"{}")], [])), end=False) == (3, [(200, b"{}")], [])


def test_a_length_over_the_bound_is_refused_without_waiting_for_its_body():
    """The stream stays open and holds no body: a read that trusted the length would wait (and allocate) for 4 GiB."""
    with pytest.raises(wire.BrokenMessage, match=f"4294967295 bytes, over the {BOUND}"):
        _read(wire.HEADER.pack(2**32 - 1, 0) + b"\x80", end=False)


def test_buffers_count_against_the_bound_before_any_is_read():
    lengths = wire.BUFFER_LENGTH.pack(BOUND)
    with pytest.raises(wire.BrokenMessage, match=f"{BOUND + 4} bytes, over the {BOUND}"):
        _read(wire.HEADER.pack(4, 1) + lengths + b"\x80", end=False)
    with pytest.raises(wire.BrokenMessage, match=f"over the {wire.MAX_BUFFERS} a message may have"):
        _read(wire.HEADER.pack(4, wire.MAX_BUFFERS + 1), end=False)


@pytest.mark.parametrize("body", [b"not a pickle", b"\x80\x05\x95", b"\x80\x04cno_such_module\nThing\n."])
def test_bytes_that_do_not_unpickle_are_a_broken_message(body):
    with pytest.raises(wire.BrokenMessage, match="does not unpickle"):
        _read(wire.HEADER.pack(len(body), 0) + body)


def test_a_buffer_the_frame_does_not_carry_is_a_broken_message():
    """A persistent id past the frame's buffers (a worker's pickle may hold anything)."""
    data = pickle.dumps(("x", 1))[:-1]  # the pickle without its STOP, a persistent load of id 0 and a pop added
    body = data + b"K\x00Q0."
    with pytest.raises(wire.BrokenMessage, match="does not unpickle"):
        _read(wire.HEADER.pack(len(body), 0) + body)


@pytest.mark.parametrize("data", [b"", b"\x00\x00", wire.pack((1, [], []))[:-3]])
def test_a_message_cut_short_by_the_end_of_the_stream_is_the_end(data):
    assert _read(data) is None


def test_a_message_cut_short_in_a_buffer_is_the_end():
    pieces = wire.frame((1, [{"body": PHOTO}], [None]), wire.OUT_OF_BAND_BYTES)
    assert _read(pieces[0] + PHOTO[:1000], bound=2 * len(PHOTO)) is None


def test_a_batchs_photo_is_sent_as_the_object_the_server_holds_beside_the_pickle():
    """No copy of the photo is made to send it: the piece handed to the kernel is the body object itself."""
    small = b"x" * 100
    head, *rest = wire.frame((1, [{"body": PHOTO, "name": small}], [None]), wire.OUT_OF_BAND_BYTES)
    assert len(rest) == 1 and rest[0] is PHOTO and len(head) < 200


def test_a_photo_arrives_in_the_worker_as_one_bytearray_small_values_as_they_were():
    batch_id, [request], arrivals = _sent_batch((4, [{"body": PHOTO, "name": b"cat"}], [1.5]))
    assert (batch_id, arrivals) == (4, [1.5])
    assert type(request["body"]) is bytearray and request["body"] == PHOTO
    assert type(request["name"]) is bytes and request["name"] == b"cat"


def test_a_body_in_pieces_arrives_whole_and_its_pieces_are_sent_as_they_are():
    pieces = [PHOTO[:100], PHOTO[100:200_000], PHOTO[200_000:]]
    body = wire.Body(pieces)
    assert wire.frame((1, [{"body": body}], [None]))[1:] == pieces
    assert all(sent is piece for sent, piece in zip(wire.frame((1, [{"body": body}], [None]))[1:], pieces))
    _, [first, second], _ = _sent_batch((2, [{"body": body}, {"body": wire.Body([b"ab", b"c"])}], [None, None]))
    assert first["body"] == PHOTO and second["body"] == bytearray(b"abc")


def test_a_batchs_answer_gives_its_answers_and_samples():
    assert wire.batch_answer((7, [(200, b"a"), (400, b"b")], [SAMPLE]), 7, 2) == ([(200, b"a"), (400, b"b")], [SAMPLE])


@pytest.mark.parametrize("message, why", [
    ("an answer", "a str where a batch's answer"),
    ((7, [(200, b"a")]), "a tuple where a batch's answer"),
    ((8, [(200, b"a"), (200, b"b")], []), "another batch"),
    (("7", [(200, b"a"), (200, b"b")], []), "another batch"),
    ((7, ((200, b"a"), (200, b"b")), []), "a tuple where a list of answers"),
    ((7, [(200, b"a")], []), "1 answers to a batch of 2"),
    ((7, [(200, b"a")] * 3, []), "3 answers to a batch of 2"),
    ((7, [(200, b"a"), ("200", b"b")], []), "not a \\(status, body bytes\\) pair"),
    ((7, [(200, b"a"), (True, b"b")], []), "not a \\(status, body bytes\\) pair"),
    ((7, [(200, b"a"), (99, b"b")], []), "not a \\(status, body bytes\\) pair"),
    ((7, [(200, b"a"), (200, "b")], []), "not a \\(status, body bytes\\) pair"),
    ((7, [(200, b"a"), (200, b"b")], None), "metric samples"),
    ((7, [(200, b"a"), (200, b"b")], [("histogram", "x", 1.0, ())]), "metric samples"),
    ((7, [(200, b"a"), (200, b"b")], [("gauge", "x", "1", ())]), "metric samples"),
    ((7, [(200, b"a"), (200, b"b")], [("gauge", "x", 1.0, (("a", 1),))]), "metric samples"),
])
def test_an_answer_of_the_wrong_shape_is_a_broken_message(message, why):
    with pytest.raises(wire.BrokenMessage, match=why):
        wire.batch_answer(message, 7, 2)


def test_only_a_two_part_message_with_the_word_is_said():
    assert wire.said((wire.READY, {"pid": 1}), wire.READY)
    assert not any(wire.said(m, wire.READY) for m in [(wire.READY,), (wire.REFUSED, "why"), wire.READY, None, (wire.READY, 1, 2)])
