"""The closed-loop load generator against a real local HTTP server: counts, concurrency, errors."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tsvk_tools.measure.loadgen import HttpTarget, run_closed_loop, summarize_records, top1_of


class _State:
    in_flight = 0
    most_in_flight = 0
    lock = threading.Lock()


def _handler(fail_every: int):
    class Handler(BaseHTTPRequestHandler):
        count = 0

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with _State.lock:
                _State.in_flight += 1
                _State.most_in_flight = max(_State.most_in_flight, _State.in_flight)
                Handler.count += 1
                number = Handler.count
            time.sleep(0.01)
            with _State.lock:
                _State.in_flight -= 1
            if fail_every and number % fail_every == 0:
                self.send_response(503)
                self.end_headers()
                self.wfile.write(b"busy")
                return
            answer = json.dumps({f"label-{body.decode()}": 0.9, "other": 0.1}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def server(request):
    fail_every = getattr(request, "param", 0)
    _State.in_flight = _State.most_in_flight = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fail_every))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/predict"
    httpd.shutdown()


def test_sends_exactly_total_requests_with_at_most_concurrency_in_flight(server):
    records = run_closed_loop(HttpTarget(server, lambda b: b), [b"a", b"b"], total=20, concurrency=3)
    assert len(records) == 20
    assert all(r.ok for r in records)
    assert 1 < _State.most_in_flight <= 3


def test_a_time_bounded_load_sends_nothing_after_its_end(server):
    until = time.monotonic() + 0.3
    records = run_closed_loop(HttpTarget(server, lambda b: b), [b"a"], total=10**9, concurrency=2, until=until)
    assert 2 <= len(records) < 200  # 10 ms a request, two clients, 0.3 s
    assert all(r.started < until for r in records)


def test_answers_are_read_per_photo(server):
    records = run_closed_loop(HttpTarget(server, lambda b: b), [b"a", b"b"], total=6, concurrency=2)
    summary = summarize_records(records)
    assert summary["top1"] == {"0": "label-a", "1": "label-b"}
    assert summary["errors"] == 0
    assert summary["throughput_ips"] > 0
    assert summary["latency_ms"]["p50"] >= 10  # the server sleeps 10 ms


@pytest.mark.parametrize("server", [4], indirect=True)
def test_errors_are_counted_not_timed(server):
    records = run_closed_loop(HttpTarget(server, lambda b: b), [b"a"], total=8, concurrency=1)
    summary = summarize_records(records)
    assert summary["errors"] == 2
    assert summary["first_error"] == "busy"


def test_connection_failures_are_records_with_status_zero():
    records = run_closed_loop(HttpTarget("http://127.0.0.1:9/none", lambda b: b, timeout_s=2), [b"a"], total=2, concurrency=2)
    assert [r.status for r in records] == [0, 0]
    assert summarize_records(records)["throughput_ips"] is None


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="concurrency"):
        run_closed_loop(HttpTarget("http://x", lambda b: b), [b"a"], total=1, concurrency=0)


def test_top1_of_reads_torchserve_answers():
    assert top1_of({"cat": 0.7, "dog": 0.3}) == "cat"
    assert top1_of([{"cat": 0.2, "dog": 0.8}]) == "dog"
    assert top1_of({"error": "bad"}) is None
