"""The soak's per-minute attribution: the CPU split of an interval and the frontend's own latencies
read from TorchServe's access log, a line at a time."""

from __future__ import annotations

import psutil

from tsvk_tools.lab.robustness.minute_load import ACCESS_LOG, AccessLogTail, CpuClock, cpu_split, read_clock, worker_cpu_ms


def clock(wall: float, busy: float, steal: float, **process_s: float) -> CpuClock:
    return CpuClock(busy, steal, 2, wall, {name.replace("_", " "): s for name, s in process_s.items()})


def test_the_split_charges_what_the_service_and_client_did_not_spend_to_outside():
    before = clock(0, busy=100, steal=10, frontend=5, worker_7=50, soak_client=3)
    after = clock(60, busy=190, steal=16, frontend=8, worker_7=110, soak_client=9)  # 120 core-seconds in all
    split = cpu_split(before, after, "soak client")
    assert split == {"service": 52.5, "client": 5.0, "outside": 17.5, "steal": 5.0}
    assert worker_cpu_ms(before, after) == 60_000


def test_a_process_in_only_one_clock_is_left_out():
    before = clock(0, busy=0, steal=0, worker_7=50)
    after = clock(60, busy=60, steal=0, worker_7=80, worker_9=5)  # worker 9 started during the minute
    assert cpu_split(before, after, "soak client")["service"] == 25.0
    assert worker_cpu_ms(before, after) == 30_000


def test_a_real_clock_counts_this_process():
    me = psutil.Process()
    first = read_clock({"soak client": me}, 0.0)
    sum(i * i for i in range(300_000))
    second = read_clock({"soak client": me}, 1.0)
    assert second.process_s["soak client"] > first.process_s["soak client"]
    assert second.busy_s >= first.busy_s and second.cores >= 1


def test_the_tail_reads_only_new_whole_lines_of_its_model(tmp_path):
    log = tmp_path / ACCESS_LOG
    log.parent.mkdir()
    log.write_text('2026-11-24T10:00:00 INFO /127.0.0.1:1 "POST /predictions/resnet18 HTTP/1.1" 200 999\n')
    tail = AccessLogTail(tmp_path, "resnet18")  # starts at the end: earlier lines are not this run's
    with log.open("a") as out:
        out.write('2026-11-24T10:00:01 INFO /127.0.0.1:1 "POST /predictions/resnet18 HTTP/1.1" 200 187\n')
        out.write('2026-11-24T10:00:01 INFO /127.0.0.1:1 "POST /predictions/resnet18 HTTP/1.1" 400 3\n')
        out.write('2026-11-24T10:00:01 INFO /127.0.0.1:1 "POST /predictions/other HTTP/1.1" 200 50\n')
        out.write('2026-11-24T10:00:01 INFO /127.0.0.1:1 "GET /ping HTTP/1.1" 200 1\n')
        out.write('2026-11-24T10:00:02 INFO /127.0.0.1:1 "POST /predictions/resnet18 HTTP/1.1" 200 2')  # half written
    assert tail.new_answers() == [(200, 187), (400, 3)]
    with log.open("a") as out:
        out.write("05\n")
    assert tail.new_answers() == [(200, 205)]
    assert tail.new_answers() == []


def test_a_missing_log_gives_no_answers(tmp_path):
    assert AccessLogTail(tmp_path, "resnet18").new_answers() == []
