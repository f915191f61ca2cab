"""The drain's accounting (tools/drain.py) on TorchServe 0.12's access-log lines, and the measurement's sorting
of requests (tools/robustness/drain.py)."""

from __future__ import annotations

import gzip

from tsvk_tools.drain import AccessLog, count_answers
from tsvk_tools.robustness.drain import Outcome, drain_report

# Lines as TorchServe 0.12 writes them (log4j2 pattern "%d{ISO8601} - %m%n", NettyUtils' session text).
ANSWERED = b'2026-11-25T16:48:28,469 - /127.0.0.1:52600 "POST /predictions/tiny HTTP/1.1" 200 47\n'
BAD_IMAGE = b'2026-11-25T16:48:28,470 - /127.0.0.1:52601 "POST /predictions/tiny HTTP/1.1" 400 3\n'
UNKNOWN_MODEL = b'2026-11-25T16:48:28,471 - /127.0.0.1:52602 "POST /predictions/nope HTTP/1.1" 404 0\n'
PING = b'2026-11-25T16:48:28,472 - /127.0.0.1:52603 "GET /ping HTTP/1.1" 200 0\n'
KSERVE_V2 = b'2026-11-25T16:48:28,473 - /127.0.0.1:52604 "POST /v2/models/tiny/infer HTTP/1.1" 200 9\n'


def test_only_answers_to_counted_inference_requests_count():
    assert count_answers(ANSWERED + BAD_IMAGE + UNKNOWN_MODEL + PING + KSERVE_V2) == 3


def test_a_line_still_being_written_waits_and_a_rolled_log_is_counted_once(tmp_path):
    log = AccessLog(tmp_path)
    (tmp_path / "access_log.log").write_bytes(ANSWERED + ANSWERED[:30])
    assert log.answers() == 1
    with (tmp_path / "access_log.log").open("ab") as current:
        current.write(ANSWERED[30:])
    assert log.answers() == 2
    (tmp_path / "access_log.log").rename(tmp_path / "old")
    (tmp_path / "access_log.25-Nov.log.gz").write_bytes(gzip.compress((tmp_path / "old").read_bytes()))
    (tmp_path / "access_log.log").write_bytes(ANSWERED)  # a new file after the roll
    assert log.answers() == 3 and log.answers() == 3


def test_a_request_sent_before_the_stop_without_an_answer_is_lost_and_after_it_refused_or_cut():
    outcomes = [Outcome(1.0, 200), Outcome(2.0, None, "ConnectionError: reset"), Outcome(6.0, 200),
                Outcome(7.0, None, "refused: ConnectionError: NewConnectionError refused"), Outcome(8.0, None, "ConnectionError: reset")]
    report = drain_report(outcomes, {"began": 5.0, "returned": 9.0, "gone": 8.5}, 10.0)
    assert (report["lost"], report["accepted"], report["answered"]) == (1, 3, 2)
    assert (report["refused_after_stop_began"], report["cut_after_stop_began"], report["exit_s"]) == (1, 1, 3.5)
