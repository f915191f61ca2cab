"""The hostile-clients part of `tsvk robustness` judges what it measured: no evidence never holds, a body sent past
the bound or an error body quoting internals fails, and a class the engine fails for a reason outside tsvk's code is
listed as a weakness (with its evidence) only where it is declared so for that engine. The raw client sends each
framing byte for byte as a hostile client would; a local socket server reads what it sent."""

from __future__ import annotations

import socket
import threading

import pytest

from tsvk_tools.lab.robustness import checks, clients
from tsvk_tools.lab.robustness.checks import failed, held
from tsvk_tools.lab.robustness.raw_http import CHUNKED, DECLARED, UNFRAMED, send_body


@pytest.mark.parametrize("judge", [clients._all_413, clients._all_4xx, lambda answers: clients._read_bounded(answers, 10)])
def test_no_answers_never_hold(judge):
    assert not judge({})


def test_a_body_read_past_the_bound_fails_and_within_it_holds():
    assert not clients._read_bounded({"POST chunked": {"sent": 11}}, 10)
    assert clients._read_bounded({"POST chunked": {"sent": 10}}, 10)


def test_statuses_are_judged_by_what_each_class_allows():
    assert not clients._all_413({"POST chunked": {"status": 400}})
    assert clients._all_4xx({"POST no length": {"status": 400}})
    assert not clients._all_4xx({"POST no length": {"status": 500}})


@pytest.mark.parametrize("body", ['Traceback (most recent call last):', 'File "/srv/x.py", line 3', "at decode_jpeg.cpp:120",
                                  "java.lang.NullPointerException: Cannot invoke"])
def test_an_error_body_quoting_internals_is_found(body):
    leaks = clients._leaks({"form": (500, body)})
    assert leaks and not clients._no_leaks(leaks, 1)


def test_an_error_body_in_tsvks_words_is_clean():
    assert clients._leaks({"form": (400, '{"error": "bad_image", "message": "the JPEG data is truncated"}')}) == {}
    assert not clients._no_leaks({}, 0)  # nothing was answered: nothing held


def test_only_a_declared_weakness_is_set_apart_and_it_keeps_its_evidence():
    verdicts = {"declared": failed("1 of 1 answered 503"), "undeclared": failed("answered 500"), "fine": held("all 200")}
    result = checks.judged_with_weaknesses(verdicts, {"declared": "the frontend passes the stamp on"})
    assert result["checks"] == {"undeclared": False, "fine": True}
    assert result["weaknesses"] == {"declared": "the frontend passes the stamp on; measured: 1 of 1 answered 503"}


def test_a_weakness_that_holds_is_counted_as_a_check():
    result = checks.judged_with_weaknesses({"declared": held("all 200")}, {"declared": "why"})
    assert result["checks"] == {"declared": True} and result["weaknesses"] == {}


class _Recorder:
    """A server that reads one connection to its end and answers 413: the bytes it got are what the client sent."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            while chunk := connection.recv(65536):
                self.received += chunk
                if self.received.endswith((b"0\r\n\r\n", b"\xff" * 10)) and b"Connection: close" not in self.received:
                    break
            connection.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


@pytest.mark.parametrize("framing, head, version", [(CHUNKED, b"Transfer-Encoding: chunked", b"HTTP/1.1"),
                                                    (DECLARED, b"Content-Length: 10", b"HTTP/1.1"),
                                                    (UNFRAMED, b"Connection: close", b"HTTP/1.0")])
def test_each_framing_is_sent_as_named(framing, head, version):
    server = _Recorder()
    answer = send_body(server.url, "PUT", "/predictions/m", {"Authorization": "Bearer k"}, 10, framing)
    server.thread.join(timeout=10)
    request_line, _, rest = server.received.partition(b"\r\n")
    assert request_line == b"PUT /predictions/m " + version
    assert head in rest and b"Authorization: Bearer k" in rest
    assert answer.status == 413 and answer.sent == 10


def test_an_unknown_framing_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="chunked, content-length, no length"):
        send_body("http://127.0.0.1:1", "POST", "/", {}, 1, "gzip")
