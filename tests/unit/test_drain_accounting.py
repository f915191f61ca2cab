"""The drain's accounting (tools/engines/torchserve/drain.py) on TorchServe 0.12's access-log lines and metrics, the order of its steps,
and the measurement's sorting of requests (tools/lab/robustness/drain_measure.py)."""

from __future__ import annotations

import gzip
import socket

from collections import Counter

import pytest
import requests

from tsvk.common.errors import DeadlineExceeded
from tsvk.worker.stopping import refusal
from tsvk_tools.engines.shared import drain as drain_module
from tsvk_tools.engines.shared.drain import DrainReport, drain, is_stop_refusal
from tsvk_tools.engines.torchserve.drain import AccessLog, count_answers
from tsvk_tools.lab.robustness.drain_measure import Outcome, counted_by_torchserve, drain_report, never_connected

# Lines as TorchServe 0.12 writes them (log4j2 pattern "%d{ISO8601} - %m%n", NettyUtils' session text).
ANSWERED = b'2026-11-25T16:48:28,469 - /127.0.0.1:52600 "POST /predictions/tiny HTTP/1.1" 200 47\n'
BAD_IMAGE = b'2026-11-25T16:48:28,470 - /127.0.0.1:52601 "POST /predictions/tiny HTTP/1.1" 400 3\n'
UNKNOWN_MODEL = b'2026-11-25T16:48:28,471 - /127.0.0.1:52602 "POST /predictions/nope HTTP/1.1" 404 0\n'
PING = b'2026-11-25T16:48:28,472 - /127.0.0.1:52603 "GET /ping HTTP/1.1" 200 0\n'
KSERVE_V2 = b'2026-11-25T16:48:28,473 - /127.0.0.1:52604 "POST /v2/models/tiny/infer HTTP/1.1" 200 9\n'


def test_only_answers_to_counted_inference_requests_count():
    assert count_answers(ANSWERED + BAD_IMAGE + UNKNOWN_MODEL + PING + KSERVE_V2) == Counter(tiny=3)
    assert count_answers(ANSWERED.replace(b"/tiny ", b"/other/2.0 ")) == Counter(other=1)


def test_a_line_still_being_written_waits_and_a_rolled_log_is_counted_once(tmp_path):
    log = AccessLog(tmp_path)
    (tmp_path / "access_log.log").write_bytes(ANSWERED + ANSWERED[:30])
    assert log.answers() == Counter(tiny=1)
    with (tmp_path / "access_log.log").open("ab") as current:
        current.write(ANSWERED[30:])
    assert log.answers() == Counter(tiny=2)
    (tmp_path / "access_log.log").rename(tmp_path / "old")
    (tmp_path / "access_log.25-Nov.log.gz").write_bytes(gzip.compress((tmp_path / "old").read_bytes()))
    (tmp_path / "access_log.log").write_bytes(ANSWERED)  # a new file after the roll
    assert log.answers() == Counter(tiny=3) and log.answers() == Counter(tiny=3)


def test_a_cut_connection_is_lost_whenever_it_was_sent_and_a_refusal_is_not_taken_in():
    stopping = dict(status=503, stop_refusal=True)
    outcomes = [Outcome(1.0, 200), Outcome(2.0, None, "ConnectionError: reset"), Outcome(4.9, **stopping), Outcome(6.0, 200),
                Outcome(7.0, None, "refused: ConnectionError: NewConnectionError refused"), Outcome(8.0, None, "ConnectionError: reset"),
                Outcome(8.5, **stopping), Outcome(9.0, 503)]
    report = drain_report(outcomes, {"began": 5.0, "returned": 9.0, "gone": 8.5}, 10.0)
    assert (report["lost"], report["lost_before_stop"], report["cut"], report["accepted"], report["answered"]) == (3, 1, 2, 5, 2)
    assert (report["refused_at_connect"], report["refused_503_server_stopping"], report["refused_503_sent_before_stop"]) == (1, 2, 1)
    assert (report["server_errors"], report["exit_s"]) == (1, 3.5)


def test_only_the_stop_s_own_503_is_a_refusal():
    assert is_stop_refusal(503, str(refusal().body()).replace("'", '"'))
    assert not is_stop_refusal(503, b'{"code": 503, "error": "deadline_exceeded"}')
    assert not is_stop_refusal(503, b"Prediction failed")
    assert not is_stop_refusal(500, b'{"error": "server_stopping"}')
    assert DeadlineExceeded.status == 503  # the reason the body, not the status, tells them apart


class _Server:
    """TorchServe's counts as the drain polls them: requests keep arriving; a tick answers one per model."""

    def __init__(self, arrived: dict, answered: dict, arrivals_per_poll: int = 1):
        self.arrived_now, self.answered_now, self.per_poll = Counter(arrived), Counter(answered), arrivals_per_poll
        self.refusing_since: Counter | None = None
        self.events: list[tuple[str, Counter, Counter]] = []

    def arrived(self) -> Counter:
        return Counter(self.arrived_now)

    def answered(self) -> Counter:
        """A poll's time passes: requests arrive (steady load: never idle until the workers refuse); two are answered
        per model, or, once refusing, every one."""
        if self.refusing_since is None:
            self.arrived_now.update({model: self.per_poll for model in self.arrived_now})
        for model in self.arrived_now:
            self.answered_now[model] = self.arrived_now[model] if self.refusing_since is not None else self.answered_now[model] + 2
        return Counter(self.answered_now)

    def refuse_new(self) -> None:
        self.refusing_since = Counter(self.answered_now)
        self.events.append(("refuse", Counter(self.answered_now), Counter(self.arrived_now)))


def test_the_workers_refuse_only_once_every_request_counted_at_the_start_is_answered(monkeypatch):
    monkeypatch.setattr(drain_module, "POLL_S", 0)
    server = _Server(arrived={"a": 10, "b": 4}, answered={"a": 2, "b": 0})
    report = drain(server, server.refuse_new, timeout_s=5)
    (_, answered_at_refusal, _), = server.events
    assert answered_at_refusal["a"] >= 10 and answered_at_refusal["b"] >= 4  # counts at the start: a 10, b 4
    assert report.drained and report.in_flight_at_stop == 0 and report.accepted == 14
    assert report.earlier_answered_s is not None


def test_without_the_metrics_the_drain_refuses_and_stops_without_waiting():
    refused = []

    class Silent:
        def arrived(self):
            return None

        def answered(self):
            return Counter()

    report = drain(Silent(), lambda: refused.append(True), timeout_s=5)
    assert refused and not report.drained and report.in_flight_at_stop is None


def test_a_steady_load_never_answered_in_time_reaches_the_timeout(monkeypatch):
    monkeypatch.setattr(drain_module, "POLL_S", 0)

    class Stuck(_Server):
        def answered(self):
            self.arrived_now.update({"a": 1})  # requests keep arriving; the workers never answer
            return Counter(self.answered_now)

    server = Stuck(arrived={"a": 3}, answered={"a": 0})
    report = drain(server, server.refuse_new, timeout_s=0.2)
    assert not report.drained and report.earlier_answered_s is None and report.in_flight_at_stop >= 3
    assert server.events, "past the timeout the workers are still told to refuse"


def test_lost_is_what_torchserve_counted_and_left_unanswered_once_nothing_could_arrive_after_the_drain():
    report = {"sent": 40, "statuses": {"200": 21, "no answer": 19}, "cut": 1, "lost": 1, "server_errors": 0}
    shut_and_drained = DrainReport(True, 0.5, 0, stopped_accepting=True, arrived=121)
    counted = counted_by_torchserve(report, Counter(m=100), shut_and_drained)
    assert (counted["lost"], counted["counted_by_torchserve"], counted["cut_never_counted"]) == (0, 21, 1)
    cut_after_counting = counted_by_torchserve(report, Counter(m=99), shut_and_drained)  # 22 counted, 21 answered
    assert (cut_after_counting["lost"], cut_after_counting["cut_never_counted"]) == (1, 0)
    still_accepting = DrainReport(True, 0.5, 0, stopped_accepting=False, arrived=121)
    assert "lost" not in counted_by_torchserve(report, Counter(m=100), still_accepting)  # the clients' count stands


def test_requests_torchserve_counted_from_the_fronts_grpc_calls_are_not_lost_once_answered():
    report = {"sent": 40, "statuses": {"200": 21, "no answer": 19}, "cut": 0, "lost": 0, "server_errors": 0}
    drained = DrainReport(True, 0.5, 0, stopped_accepting=True, arrived=137)  # 21 REST and 16 gRPC calls counted
    assert counted_by_torchserve(report, Counter(m=100), drained)["lost"] == 16  # without the gRPC answers: all lost
    assert counted_by_torchserve(report, Counter(m=100), drained, answered_elsewhere=16)["lost"] == 0


def test_a_connection_never_made_is_refused_at_connect_whatever_the_kernel_answered():
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(requests.ConnectionError) as refused:
        requests.post(f"http://127.0.0.1:{port}/predictions/m", data=b"x", timeout=5)
    assert never_connected(refused.value)
    assert never_connected(requests.ConnectTimeout("connect timed out"))
    assert not never_connected(requests.ConnectionError("('Connection aborted.', ConnectionResetError(104, 'reset'))"))
    assert not never_connected(requests.ReadTimeout("read timed out"))
