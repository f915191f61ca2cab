"""engine=kserve: the same config, tsvk's own engine as the pod's server instead of TorchServe, from the image without Java.

Rendered with the real helm and checked field by field; the Kubernetes schema validation, lint and hardening of the
kserve scenarios run with every other scenario (tests/support/helm_scenarios.py), and `make kube-check ENGINE=kserve`
runs the rendered pod for real. The startup probe's script is run as the pod runs it, on status files of the
engine's own format (written by its `_Engine.write_status`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.support.helm import RELEASE, config_with
from tests.support.helm_scenarios import SCENARIOS

from tsvk_tools.engines.kserve.files import STATUS_FILE
from tsvk_tools.engines.shared.metrics import EngineMetrics
from tsvk_tools.engines.kserve.server import _Engine
from tsvk_tools.engines import container as entrypoint

pytestmark = pytest.mark.helm

KSERVE = SCENARIOS["kserve-engine"]
KSERVE_OIP = SCENARIOS["kserve-engine-oip-download"]


@pytest.fixture(scope="module")
def kserve(render):
    return render(KSERVE)


@pytest.fixture(scope="module")
def torchserve(render):
    return render({})


def entry_args(server: dict) -> argparse.Namespace:
    """The container's arguments as the image's PID 1 parses them."""
    assert server["command"] == ["python", "-m", "tsvk_tools.engines.container"]
    parser = argparse.ArgumentParser()
    entrypoint.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["run-container", *server["args"]])


def test_torchserve_stays_the_default_and_its_pod_is_unchanged(torchserve):
    server = torchserve.server()
    assert server["name"] == "torchserve"
    assert entry_args(server).engine == "torchserve" and "--engine" not in server["args"]
    assert "http://127.0.0.1:8081" in server["startupProbe"]["exec"]["command"]
    assert {v["name"] for v in torchserve.pod_spec()["volumes"]} >= {"run", "java-tmp", "logs"}


def test_the_image_without_java_runs_the_engine_from_its_entrypoint(kserve, torchserve, render):
    server = kserve.server()
    assert server["name"] == "kserve"
    assert server["image"] == torchserve.server()["image"] + "-kserve", "make image ENGINE=kserve's tag: no Java, no TorchServe"
    pinned = {"image": {"tag": "0.12.0-cpu"}}
    assert render({**KSERVE, **pinned}).server()["image"] == render(pinned).server()["image"], "a tag set names one image for both"
    args = entry_args(server)
    assert args.engine == "kserve"
    assert (args.config, args.drain_timeout) == (entry_args(torchserve.server()).config, 30)
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["PYTHONPATH"] == "/opt/tsvk", "the engine's workers start from the entrypoint's folder"


def test_probes_ask_the_engine_it_has_no_management_api(kserve):
    server = kserve.server()
    args = entry_args(server)
    command = server["startupProbe"]["exec"]["command"]
    assert command[:3] == ["python", "/etc/tsvk/models-ready.py", f"{args.run_dir}/{STATUS_FILE}"]
    assert command[3:] == ["resnet50"]
    for kind in ("readinessProbe", "livenessProbe"):
        assert server[kind]["httpGet"] == {"path": "/ping", "port": "inference"}


def test_only_the_inference_port_and_no_java_scratch(kserve, render):
    server = kserve.server()
    assert [p["name"] for p in server["ports"]] == ["inference"]
    volumes = {v["name"]: v for v in kserve.pod_spec()["volumes"]}
    assert "java-tmp" not in volumes and "java-tmp" not in {m["name"] for m in server["volumeMounts"]}
    assert volumes["run"]["emptyDir"]["sizeLimit"] == "2Gi", "the engine unpacks the archives into its run dir"
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert mounts["run"] == str(entry_args(server).run_dir)
    assert kserve.pod_spec()["terminationGracePeriodSeconds"] == 50


def test_oip_is_the_engines_own_no_front_container(render):
    rendered = render(KSERVE_OIP)
    assert [c["name"] for c in rendered.pod_spec()["containers"]] == ["kserve"]
    server = rendered.server()
    assert {p["name"]: p["containerPort"] for p in server["ports"]} == {"inference": 8080, "oip-grpc": 8001}
    ports = {p["name"]: p for p in rendered.one("Service", f"{RELEASE}-tsvk")["spec"]["ports"]}
    assert ports["oip-rest"]["targetPort"] == "inference", "the engine's OIP REST paths are on its inference port"
    assert ports["oip-grpc"]["targetPort"] == "oip-grpc"
    policy = rendered.one("NetworkPolicy", f"{RELEASE}-tsvk")["spec"]
    assert [p["port"] for p in policy["ingress"][0]["ports"]] == ["inference", "oip-grpc"]
    test_policy = rendered.one("NetworkPolicy", "-test")["spec"]
    assert [p["port"] for p in test_policy["egress"][-1]["ports"]] == ["inference"]
    assert rendered.one("Pod", "-test-prediction")["spec"]["containers"][0]["env"][2]["name"] == "OIP_URL"


def test_what_the_engine_cannot_serve_is_refused_by_name(render, render_error):
    values = {"service": {"exposeManagement": True},
              "torchserve": {"configProperties": config_with(management_address="http://0.0.0.0:8081")}}
    render(values)  # TorchServe takes the same values
    error = render_error({"engine": "kserve", **values})
    assert "service.exposeManagement" in error and "engine kserve" in error


@pytest.mark.parametrize("values", [
    {"service": {"exposeMetrics": True}, "torchserve": {"configProperties": config_with(metrics_address="http://0.0.0.0:8082")}},
    {"serviceMonitor": {"enabled": True}, "torchserve": {"configProperties": config_with(metrics_address="http://0.0.0.0:8082")}},
    SCENARIOS["monitoring"],
    SCENARIOS["hpa-custom-metric"],
], ids=["exposeMetrics", "serviceMonitor", "monitoring", "hpa-custom-metric"])
def test_the_metrics_features_render_for_the_engine_as_for_torchserve(render, values):
    """The engine serves TorchServe's metric names on the config's metrics address: the chart's metrics features
    render for it as for TorchServe, and the container exposes the metrics port whenever the Service or the
    ServiceMonitor reads it."""
    torchserve, kserve = render(values), render({"engine": "kserve", **values})
    kinds = lambda rendered: sorted((d["kind"], d["metadata"]["name"]) for d in rendered.documents)  # noqa: E731
    assert kinds(kserve) == kinds(torchserve)
    ports = lambda rendered: {p["name"] for c in rendered.one("Deployment")["spec"]["template"]["spec"]["containers"]  # noqa: E731
                              for p in c.get("ports", [])}
    assert ("metrics" in ports(kserve)) == ("metrics" in ports(torchserve))


def test_the_schema_allows_only_the_two_engines(render_error):
    assert "engine" in render_error({"engine": "triton"})


class _Pool(SimpleNamespace):
    """The fields of the engine's ModelPool that its status file reads (tools/engines/kserve/pool.py)."""


def _pool(workers: int, ready: int) -> _Pool:
    model = SimpleNamespace(archive=Path("resnet50.mar"), batch_size=8, max_batch_delay_ms=50, workers=workers, gpu_ids=())
    running = [SimpleNamespace(number=i, pid=1000 + i, ready=lambda loaded=i < ready: loaded) for i in range(workers)]
    return _Pool(model=model, starts=workers, deaths=0, workers=running, ready_workers=ready, on_change=None)


@pytest.mark.parametrize(("pools", "ready"), [
    ({"resnet50": _pool(2, 2)}, True),
    ({"resnet50": _pool(2, 1)}, False),  # one worker still loading: its process runs, but it has not loaded
    ({}, False),  # refused (or not yet started): absent from the file
])
def test_the_startup_probe_reads_the_engines_status_file(kserve, tmp_path, pools, ready):
    _Engine(pools, tmp_path, EngineMetrics()).write_status()
    (configmap,) = kserve.all("ConfigMap")
    script = tmp_path / "models-ready.py"
    script.write_text(configmap["data"]["models-ready.py"])
    command = kserve.server()["startupProbe"]["exec"]["command"]
    argv = [sys.executable, str(script), str(tmp_path / STATUS_FILE), *command[3:]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert (result.returncode == 0) is ready, result.stderr
