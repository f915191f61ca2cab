"""The slow-clients swarm (tools/lab/robustness/swarm.py) against a uvicorn server of this process serving within small
bounds (tools/oip/bounded_http.py): each kind of connection is held, closed by the server within its bound and opened
again, and the connections past the server's bound are answered 503. A second of each bound keeps it short."""

from __future__ import annotations

import time

import pytest

from tests.support.bounded_server import bounded_server
from tsvk_tools.lab.robustness.swarm import IDLE, KEEP_ALIVE, SLOWLORIS, Swarm, SwarmPlan, SwarmProcess, open_files_for
from tsvk_tools.oip.connection_bounds import HttpBounds

CONNECTIONS = 40
BOUNDS = HttpBounds(header_timeout_s=1.0, keep_alive_s=1.0, max_connections=CONNECTIONS + 10)


async def _ok(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def port():
    with bounded_server(_ok, BOUNDS) as port:
        yield port


def _swarm(port: int) -> Swarm:
    return Swarm(SwarmPlan("127.0.0.1", port, CONNECTIONS, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", drip_s=(0.2, 0.4)))


def test_every_kind_is_held_closed_within_its_bound_and_opened_again(port):
    swarm = _swarm(port)
    swarm.start()
    assert swarm.ramped.wait(10)
    time.sleep(2.5)
    swarm.stop()
    figures = swarm.figures()
    assert figures["peak_open"] == CONNECTIONS
    kinds = figures["kinds"]
    assert {kind: kinds[kind]["connections"] for kind in kinds} == {IDLE: 16, SLOWLORIS: 16, KEEP_ALIVE: 8}
    for kind in (IDLE, SLOWLORIS, KEEP_ALIVE):
        closes = kinds[kind]
        assert closes["closed_by_server"] >= closes["connections"] and closes["opened"] > closes["connections"], (kind, closes)
        assert 0.5 < closes["close_after_s"]["max"] < 2.5, (kind, closes)
    assert set(kinds[IDLE]["answers"]) == {"none"} and set(kinds[SLOWLORIS]["answers"]) == {"408"}
    assert set(kinds[KEEP_ALIVE]["answers"]) == {"200"}


def test_connections_past_the_bound_are_answered_503_by_a_swarm_in_a_process_of_its_own(port):
    swarm = SwarmProcess(SwarmPlan("127.0.0.1", port, CONNECTIONS, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ramp_timeout_s=10)
    swarm.start()
    assert swarm.wait_ramped()
    answers = swarm.beyond(BOUNDS.max_connections - CONNECTIONS + 5)
    assert swarm.cpu_s() > 0
    figures = swarm.stop()
    assert set(answers) <= {"200", "503"} and answers["503"] >= 5, answers
    assert figures["peak_open"] == CONNECTIONS


def test_the_open_files_limit_is_checked_before_a_run():
    with pytest.raises(ValueError, match="ulimit -Hn"):
        open_files_for(10**9)
