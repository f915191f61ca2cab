"""kube-check's own logic, without podman: how it reads the rendered chart, judges a stop under load,
names the local image and records its results."""

from __future__ import annotations

import json
import time

import pytest
import requests

from tsvk_tools.errors import UsageError
from tsvk_tools.lab.kube_check import pod_drain as drain, load
from tsvk_tools.lab.kube_check.__main__ import passed, worker_memory
from tsvk_tools.lab.kube_check.check import image_values, local_repository
from tsvk_tools.lab.kube_check.load import OpenLoop, Sent
from tsvk_tools.lab.kube_check.pod import _ours
from tsvk_tools.lab.kube_check.pod import Pod
from tsvk_tools.lab.kube_check.probes import crashed, port_number, wait_green
from tsvk_tools.lab.kube_check.results import LATEST, write_results

SIGTERM_AT = 100.0


def sent(started: float, outcome: str, status: int = 200) -> Sent:
    return Sent(started, started + 0.5, status, outcome)


@pytest.mark.parametrize("container, timeout", [
    ({"env": [{"name": "TSVK_DRAIN_TIMEOUT_S", "value": "30"}]}, 30),
    ({"command": ["tsvk-entrypoint"], "args": ["--drain-timeout=45", "--", "torchserve"]}, 45),
    ({"command": ["tsvk-entrypoint", "--drain-timeout", "20"]}, 20),
    ({"command": ["torchserve"], "args": ["--start", "--foreground"]}, None),
    ({"env": [{"name": "DRAIN_MODE", "value": "fast"}]}, None),
])
def test_drain_timeout_is_read_from_the_rendered_container(container, timeout):
    assert drain.drain_timeout_s(container) == timeout


def test_a_stop_that_answers_everything_accepted_in_time_passes():
    records = [sent(90, "answered"), sent(99.9, "answered"), sent(101, "refused", 0), sent(102, "refused", 503)]
    result = drain.summarize(records, SIGTERM_AT, exit_s=12.0, timeout=30, grace=60, rate=7.0, first="tsvk-entrypoint",
                             states={"torchserve": {"ExitCode": 0}})
    assert result["ok"], result["problems"]
    assert result["sent_before_sigterm"] == {"answered": 2}
    assert result["sent_after_sigterm"] == {"refused": 2}
    assert result["refused_with_503_server_stopping"] == 1


@pytest.mark.parametrize("record", [sent(99, "lost", 0), sent(99, "failed", 503), sent(101, "failed", 500), sent(101, "lost", 0),
                                    sent(101, "failed", 503)])
def test_an_accepted_request_left_unanswered_fails_the_stop(record):
    result = drain.summarize([sent(90, "answered"), record], SIGTERM_AT, 5.0, 30, 60, 7.0, "x", {"torchserve": {"ExitCode": 0}})
    assert not result["ok"] and "not answered" in result["problems"][0]


def test_a_stop_slower_than_the_drain_timeout_plus_margin_or_killed_fails():
    slow = drain.summarize([sent(90, "answered")], SIGTERM_AT, 35.1, 30, 60, 7.0, "x", {"torchserve": {"ExitCode": 0}})
    assert not slow["ok"] and "over the drain timeout + 5 s (35 s)" in slow["problems"][0]
    killed = drain.summarize([sent(90, "answered")], SIGTERM_AT, 10, 30, 60, 7.0, "x", {"torchserve": {"ExitCode": 137}})
    assert not killed["ok"] and "SIGKILLed" in killed["problems"][0]


def test_without_a_draining_entrypoint_the_failure_says_what_is_missing():
    result = drain.summarize([sent(90, "answered")], SIGTERM_AT, 1.0, None, 60, 7.0,
                             "/opt/venv/bin/python /opt/venv/bin/torchserve --start", {"torchserve": {"ExitCode": 0}})
    assert not result["ok"]
    assert "names no drain timeout" in result["problems"][0] and "torchserve --start" in result["problems"][0]
    assert "draining entrypoint" in result["problems"][0]


@pytest.mark.parametrize("image, expected", [
    ("tsvk/torchserve:0.12.0-cpu", ("localhost/tsvk/torchserve", "0.12.0-cpu")),
    ("localhost/tsvk/torchserve:0.12.0-cpu", ("localhost/tsvk/torchserve", "0.12.0-cpu")),
    ("registry.example.com:5000/ml/tsvk:1", ("registry.example.com:5000/ml/tsvk", "1")),
])
def test_a_local_image_is_named_as_podman_stores_it(image, expected):
    assert local_repository(image) == expected


def test_the_chart_is_pointed_at_the_image_by_digest():
    flags = image_values("tsvk/torchserve:0.12.0-cpu", "sha256:" + "1" * 64)
    assert flags == ["--set", "image.repository=localhost/tsvk/torchserve", "--set", "image.tag=0.12.0-cpu",
                     "--set", "image.digest=sha256:" + "1" * 64]


def test_only_pods_and_volumes_named_for_kube_check_are_touched():
    assert _ours("tsvk-kube-default-pod-0") == "tsvk-kube-default-pod-0"
    with pytest.raises(UsageError, match="only touches"):
        _ours("tsvk-newcomer-rootpath")


def test_probe_ports_resolve_by_name_or_number():
    container = {"name": "torchserve", "ports": [{"name": "inference", "containerPort": 8080}]}
    assert port_number(container, "inference") == 8080
    assert port_number(container, 9000) == 9000
    with pytest.raises(UsageError, match="no port named 'oip-rest'"):
        port_number(container, "oip-rest")


class InspectedPod(Pod):
    """A pod whose `podman inspect` answers the given records in turn: the fields read are those of podman 4's
    InspectContainerData (libpod/define/container_inspect.go: RestartCount, State.Status, State.ExitCode)."""

    def __init__(self, records):
        super().__init__("tsvk-kube-test-pod-0", {"torchserve": "tsvk-kube-test-pod-0-torchserve"})
        object.__setattr__(self, "records", iter(records))

    def inspect(self, container):
        return next(self.records)

    def logs(self, container, lines=40):
        return "ModuleNotFoundError: No module named 'tsvk'"


def test_a_crashed_or_restarted_container_is_reported_with_its_last_lines_and_a_running_one_is_not():
    running = {"State": {"Status": "running", "ExitCode": 0}, "RestartCount": 0}
    restarted = {"State": {"Status": "running", "ExitCode": 0}, "RestartCount": 1}
    exited = {"State": {"Status": "exited", "ExitCode": 1}, "RestartCount": 0}
    assert crashed(InspectedPod([running]), "torchserve") is None
    assert "restarted 1 time(s)" in crashed(InspectedPod([restarted]), "torchserve")
    report = crashed(InspectedPod([exited]), "torchserve")
    assert "exited (exit code 1" in report and "No module named 'tsvk'" in report


def test_a_probe_stops_waiting_when_its_container_crashes(monkeypatch):
    monkeypatch.setattr("tsvk_tools.lab.kube_check.probes.POLL_S", 0.01)
    container = {"name": "torchserve", "ports": [{"name": "inference", "containerPort": 9}],
                 "startupProbe": {"httpGet": {"path": "/ping", "port": "inference"}, "periodSeconds": 10,
                                  "failureThreshold": 60}}
    pod = InspectedPod([{"State": {"Status": "running"}, "RestartCount": 0}] * 3
                       + [{"State": {"Status": "exited", "ExitCode": 1}, "RestartCount": 0}])
    began = time.monotonic()
    result = wait_green(pod, "127.0.0.1", container, "startupProbe", began)
    assert not result.ok and "exited" in result.detail
    assert time.monotonic() - began < 30, "not the probe's 600 s allowance"


def test_open_loop_refuses_a_rate_that_is_not_positive():
    with pytest.raises(ValueError, match="rate must be > 0"):
        OpenLoop("http://127.0.0.1:1/", b"", 0)


def test_results_are_one_dated_file_and_a_link_to_the_latest(tmp_path):
    first = write_results({"passed": True}, tmp_path, started=0)
    second = write_results({"passed": False}, tmp_path, started=3600)
    assert (first.name, second.name) == ("19700101T000000Z-kube-check.json", "19700101T010000Z-kube-check.json")
    latest = tmp_path / LATEST
    assert latest.is_symlink() and latest.readlink().name == second.name, "a pointer, not a copy"
    assert json.loads(latest.read_text()) == {"date": "1970-01-01T01:00:00Z", "passed": False}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name, LATEST])


def test_a_connect_that_never_completes_was_not_accepted_and_a_read_that_never_ends_was(monkeypatch):
    def raising(error):
        def post(*args, **kwargs):
            raise error
        return post

    monkeypatch.setattr(load.requests, "post", raising(requests.ConnectTimeout("Max retries exceeded (ConnectTimeoutError)")))
    assert load.send_fresh("http://10.88.0.9:8080/predictions/m", b"x", 1).outcome == "refused"
    monkeypatch.setattr(load.requests, "post", raising(requests.ReadTimeout("Read timed out")))
    assert load.send_fresh("http://10.88.0.9:8080/predictions/m", b"x", 1).outcome == "lost"
    monkeypatch.setattr(load.requests, "post", raising(requests.ConnectionError("Connection aborted: reset by peer")))
    assert load.send_fresh("http://10.88.0.9:8080/predictions/m", b"x", 1).outcome == "lost"


def test_worker_memory_is_sampled_while_the_load_runs_and_compared_as_medians(monkeypatch):
    monkeypatch.setattr(load, "RSS_SAMPLE_S", 0.05)
    monkeypatch.setattr(load, "throughput", lambda *args: time.sleep(0.5) or {"throughput_ips": 1.0})
    readings = iter([[400.0, 500.0], [], [950.0]] + [[1000.0]] * 100)
    measured, samples = load.throughput_with_memory("url", b"", 0.5, 1, lambda: next(readings))
    assert measured == {"throughput_ips": 1.0}
    assert samples[:2] == [900.0, 950.0] and len(samples) >= 5  # summed over workers; a reading of none skipped
    summary = worker_memory({"pod": [990.0, 1010.0, 1200.0], "make serve": [950.0, 1000.0, 1005.0]})
    assert summary["pod"] == {"median": 1010.0, "min": 990.0, "max": 1200.0, "samples": 3}
    assert summary["pod_vs_make_serve"] == 1.01 and not summary["pod_no_larger"]  # above make serve's whole range
    assert worker_memory({"pod": [1000.0], "make serve": [950.0, 1005.0]})["pod_no_larger"]
    assert "pod_no_larger" not in worker_memory({"pod": [], "make serve": [950.0]})


def test_each_variant_sets_the_engine_and_names_its_pods_apart():
    from tsvk_tools.lab.kube_check.check import variants

    chosen = variants("http://10.88.0.1:1/resnet50.mar", "10.88.0.1/32", 1, "resnet50", "ab" * 32, "kserve")
    assert {name: v.values["engine"] for name, v in chosen.items()} == {"default": "kserve", "oip": "kserve", "download": "kserve"}
    assert chosen["download"].values["modelStore"]["source"] == "download", "the engine joins the variant's own values"
    assert [v.release for v in chosen.values()] == ["tsvk-kube-kserve-default", "tsvk-kube-kserve-oip", "tsvk-kube-kserve-download"]
    assert all(_ours(v.release) for v in chosen.values())
    plain = variants("http://10.88.0.1:1/resnet50.mar", "10.88.0.1/32", 1, "resnet50", "ab" * 32)
    assert [v.release for v in plain.values()] == ["tsvk-kube-default", "tsvk-kube-oip", "tsvk-kube-download"]


def test_the_engine_is_one_of_tsvks(capsys):
    from tsvk_tools.lab.kube_check.__main__ import parse_args

    assert parse_args(["--engine", "kserve"]).engine == "kserve"
    assert parse_args([]).engine == "torchserve"
    with pytest.raises(SystemExit):
        parse_args(["--engine", "triton"])
    assert "invalid choice" in capsys.readouterr().err


def _rendered(server: str, config: str):
    from tsvk_tools.lab.kube_check.chart import Rendered, Variant

    deployment = {"kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"template": {"spec": {"containers": [{"name": server}]}}}}
    configmap = {"kind": "ConfigMap", "data": {"config.properties": config}}
    return Rendered(Variant("oip"), [configmap, deployment])


def test_oip_rest_is_the_fronts_port_or_the_engines_inference_port():
    from tsvk_tools.lab.kube_check.check import oip_rest_port

    config = "inference_address=http://0.0.0.0:8080\ntsvk.oip.rest_port=8000\ntsvk.oip.grpc_port=8001\n"
    assert oip_rest_port(_rendered("torchserve", config)) == 8000
    assert oip_rest_port(_rendered("kserve", config)) == 8080


def test_a_throughput_comparison_without_one_side_fails_the_check():
    ok = {"checks": [{"name": "probes", "ok": True, "detail": ""}]}
    compared = {**ok, "throughput": {"pod_vs_make_serve": 0.98}, "drain": {"ok": True}}
    one_sided = {**ok, "throughput": {"pod_vs_make_serve": None}, "drain": {"ok": True}}
    assert passed({"variants": {"default": compared, "oip": ok}})
    assert not passed({"variants": {"default": one_sided, "oip": ok}})
