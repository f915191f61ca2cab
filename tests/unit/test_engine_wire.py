"""The server's side of the worker channel (tools/engines/kserve/wire.py): a length over the bound is refused before a
byte of its body is awaited, bytes that do not unpickle are a broken message, a message cut short is the end of the
stream, and a batch's answer is checked for its batch, one (status, body) per request and well-formed metric samples
before the server acts on it. The engine's own handling (503, the worker replaced) is tests/integration/
test_engine_worker_faults.py's."""

from __future__ import annotations

import asyncio

import pytest

from tsvk_tools.engines.kserve import wire

BOUND = 1024
SAMPLE = ("counter", "TsvkRequests", 1.0, (("ModelName", "tiny"),))


def _read(data: bytes, end: bool = True):
    """What read_message makes of `data` (then the end of the stream, unless `end` is False), within 5 s."""

    async def scenario():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if end:
            reader.feed_eof()
        return await asyncio.wait_for(wire.read_message(reader, BOUND), 5)

    return asyncio.run(scenario())


def test_a_message_within_the_bound_is_read():
    assert _read(wire.pack((3, [(200, b"{}")], [])), end=False) == (3, [(200, b"{}")], [])


def test_a_length_over_the_bound_is_refused_without_waiting_for_its_body():
    """The stream stays open and holds no body: a read that trusted the length would wait (and allocate) for 4 GiB."""
    with pytest.raises(wire.BrokenMessage, match=f"4294967295 bytes, over the {BOUND}"):
        _read(wire.HEADER.pack(2**32 - 1) + b"\x80", end=False)


@pytest.mark.parametrize("body", [b"not a pickle", b"\x80\x05\x95", b"\x80\x04cno_such_module\nThing\n."])
def test_bytes_that_do_not_unpickle_are_a_broken_message(body):
    with pytest.raises(wire.BrokenMessage, match="does not unpickle"):
        _read(wire.HEADER.pack(len(body)) + body)


@pytest.mark.parametrize("data", [b"", b"\x00\x00", wire.pack((1, [], []))[:-3]])
def test_a_message_cut_short_by_the_end_of_the_stream_is_the_end(data):
    assert _read(data) is None


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
