"""The large-uploads part of `tsvk robustness` derives its bounds from the config and judges what it measured: no
evidence never holds, an upload cut without an answer or sent whole before its refusal fails, memory is judged per
process (the server against the bodies the config lets it hold, each listed worker against tsvk config's estimate,
the engine's fork server not at all), and TorchServe's reading of every body is listed as its weakness, not failed.
The raw client sends a real upload's bytes as they are."""

from __future__ import annotations

import socket
import threading

import pytest

from tsvk_tools import defaults
from tsvk_tools.lab.robustness import checks, large_uploads
from tsvk_tools.lab.robustness.large_uploads import (ANSWERED, NOT_ANSWERED, OK, QUEUE_FULL, REFUSED, REFUSED_EARLY, SERVER_BOUNDED,
                                                     WORKERS_BOUNDED, Upload, UploadBounds, judge, outcome_of, upload_figures)
from tsvk_tools.lab.robustness.raw_http import DECLARED, send_body
from tsvk_tools.lab.robustness.robustness_cli import LARGE_UPLOADS, _results_name, parse_parts

MiB = 2**20
SIZE = 11 * MiB  # about a 48 MP phone JPEG
BOUNDS = UploadBounds(job_queue_size=4, workers=2, batch=8, max_request_bytes=32 * MiB, worker_estimate_mb=773.0)
WORKERS = {"worker 11", "worker 12"}
BEFORE = {"frontend": 200.0, "worker 11": 530.0, "worker 12": 530.0, "worker 10": 820.0}  # worker 10: the fork server
PEAKS = {"frontend": 370.0, "worker 11": 600.0, "worker 12": 540.0, "worker 10": 820.0}
QUEUE_FULL_BODY = (b'{"code": 503, "type": "ServiceUnavailableException", '
                   b'"message": "Model \\"m\\" has no worker to serve inference request."}')


def _uploads(accepted: int = 4, refused: int = 12, sent: int = 3 * MiB) -> list[Upload]:
    return [Upload(200, OK, SIZE, 1.2)] * accepted + [Upload(503, QUEUE_FULL, sent, 0.03)] * refused


def test_the_bounds_come_from_the_config():
    assert BOUNDS.bodies_held == 4 + 2 * 8  # the queue's places, and every place of each worker's batch
    assert BOUNDS.server_growth_mb == large_uploads.BODY_COPIES * 20 * 32 + large_uploads.BURST_MARGIN_MB
    assert large_uploads.served_properties() == {"job_queue_size": str(defaults.LARGE_UPLOADS_QUEUE)}
    assert defaults.LARGE_UPLOADS > defaults.LARGE_UPLOADS_QUEUE  # the burst is more than the queue holds


@pytest.mark.parametrize("field", ["job_queue_size", "workers", "batch", "max_request_bytes"])
def test_a_config_without_room_is_refused_naming_the_key(field):
    values = {"job_queue_size": 4, "workers": 2, "batch": 8, "max_request_bytes": MiB, "worker_estimate_mb": 700.0, field: 0}
    with pytest.raises(ValueError, match=f"{field} must be >= 1, got 0"):
        UploadBounds(**values)


@pytest.mark.parametrize("status, body, outcome", [(200, b"{}", OK), (503, QUEUE_FULL_BODY, QUEUE_FULL),
                                                   (503, b'{"error": "worker_died"}', "503"), (0, b"", NOT_ANSWERED), (500, b"", "500")])
def test_each_answer_is_counted_by_what_it_says(status, body, outcome):
    assert outcome_of(status, body) == outcome


def test_no_evidence_never_holds():
    verdicts = judge([], SIZE, BOUNDS, {}, {}, set())
    assert not any(verdicts.values()), {name: v.reason for name, v in verdicts.items() if v}


def test_a_burst_refused_early_within_its_bounds_holds():
    verdicts = judge(_uploads(), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)
    assert all(verdicts.values()), {name: v.reason for name, v in verdicts.items() if not v}
    assert "4 200, 12 503 queue full" in verdicts[ANSWERED].reason


@pytest.mark.parametrize("other", [Upload(0, NOT_ANSWERED, SIZE, 30.0), Upload(500, "500", SIZE, 1.0)])
def test_an_upload_cut_without_an_answer_or_answered_500_fails(other):
    assert not judge([*_uploads(), other], SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)[ANSWERED]


def test_a_burst_the_queue_took_whole_fails_for_refusing_none():
    verdicts = judge(_uploads(accepted=16, refused=0), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)
    assert not verdicts[REFUSED] and not verdicts[REFUSED_EARLY]


def test_a_refusal_after_the_whole_body_was_sent_fails():
    assert not judge(_uploads(sent=SIZE), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)[REFUSED_EARLY]
    assert judge(_uploads(sent=SIZE - 1), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)[REFUSED_EARLY]


def test_the_server_is_judged_on_its_own_growth():
    over = {**PEAKS, "frontend": BEFORE["frontend"] + BOUNDS.server_growth_mb}
    assert not judge(_uploads(), SIZE, BOUNDS, BEFORE, over, WORKERS)[SERVER_BOUNDED]
    missing = {k: v for k, v in PEAKS.items() if k != "frontend"}
    assert not judge(_uploads(), SIZE, BOUNDS, BEFORE, missing, WORKERS)[SERVER_BOUNDED]


def test_each_listed_worker_is_judged_on_its_peak_and_the_fork_server_not_at_all():
    assert judge(_uploads(), SIZE, BOUNDS, BEFORE, {**PEAKS, "worker 10": 5000.0}, WORKERS)[WORKERS_BOUNDED]
    over = judge(_uploads(), SIZE, BOUNDS, BEFORE, {**PEAKS, "worker 12": 900.0}, WORKERS)[WORKERS_BOUNDED]
    assert not over and "worker 12 900 MiB (530 before the burst)" in over.reason
    assert not judge(_uploads(), SIZE, BOUNDS, BEFORE, PEAKS, {"worker 11"})[WORKERS_BOUNDED]  # fewer than configured


def test_torchserve_reading_every_body_is_its_weakness_and_the_engine_s_failure():
    verdicts = judge(_uploads(sent=SIZE), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)
    on_torchserve = checks.judged_with_weaknesses(verdicts, large_uploads.KNOWN_WEAKNESSES["torchserve"])
    assert REFUSED_EARLY not in on_torchserve["checks"] and "sent whole" in on_torchserve["weaknesses"][REFUSED_EARLY]
    on_engine = checks.judged_with_weaknesses(verdicts, large_uploads.KNOWN_WEAKNESSES.get("kserve", {}))
    assert on_engine["checks"][REFUSED_EARLY] is False and on_engine["weaknesses"] == {}


def test_the_figures_count_answers_bytes_and_roles():
    figures = upload_figures(_uploads(), SIZE, BOUNDS, BEFORE, PEAKS, WORKERS)
    assert figures["answers"] == {OK: 4, QUEUE_FULL: 12}
    assert figures["refused_sent_bytes"] == {"max": 3 * MiB, "total": 36 * MiB, "of": 12 * SIZE, "whole": 0}
    assert {name: f["role"] for name, f in figures["rss_mb"].items()} == {
        "frontend": "server", "worker 10": "other", "worker 11": "worker", "worker 12": "worker"}
    assert figures["server_growth_in_uploads"] == round(170 / 11, 1)


def _recorded(content: bytes) -> tuple[bytes, int]:
    """What a local server read of one request carrying `content` (answered 200 once it has the body), and `sent`."""
    listener, received = socket.create_server(("127.0.0.1", 0)), bytearray()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while not received.endswith(content) and (chunk := connection.recv(65536)):
                received.extend(chunk)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    answer = send_body(f"http://127.0.0.1:{listener.getsockname()[1]}", "POST", "/predictions/m", {}, len(content), DECLARED,
                       timeout_s=10, content=content)
    thread.join(timeout=10)
    listener.close()
    assert answer.status == 200
    return bytes(received), answer.sent


def test_an_upload_is_sent_as_its_bytes():
    content = bytes(range(256)) * 1000  # several pieces, none alike
    received, sent = _recorded(content)
    assert received.endswith(b"Content-Length: 256000\r\n\r\n" + content) and sent == len(content)
    with pytest.raises(ValueError, match="total must be the content's length"):
        send_body("http://127.0.0.1:1", "POST", "/", {}, 3, DECLARED, content=content)


def test_the_part_runs_on_either_engine_under_its_own_results_name():
    assert LARGE_UPLOADS in parse_parts(None, "kserve") and LARGE_UPLOADS in parse_parts(None, "torchserve")
    assert _results_name("kserve", (LARGE_UPLOADS,)) == "robustness-kserve-large-uploads"
    assert _results_name("torchserve", (LARGE_UPLOADS,)) == "robustness-large-uploads"
