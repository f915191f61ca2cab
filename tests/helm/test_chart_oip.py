"""protocol=oip: the Open Inference Protocol front beside TorchServe, its ports on the Service, its probes.

Rendered with the real helm and checked field by field; the Kubernetes schema validation of the oip
scenarios runs with every other scenario (test_chart_render.py), and test_chart_pod_sandbox.py runs
the rendered front for real.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from tests.support.helm import CHART, RELEASE, config_with, default_values, front_target, run_helm
from tests.support.helm_scenarios import OIP_CONFIG, SCENARIOS

pytestmark = pytest.mark.helm

OIP = SCENARIOS["oip"]
CONFIG_FILE = "config.properties"


@pytest.fixture(scope="module")
def oip(render):
    return render(OIP)


def _front(rendered) -> dict:
    return rendered.container("oip-front")


def _oip_with(config: str, **values) -> dict:
    return {"protocol": "oip", "torchserve": {"configProperties": config}, **values}


def test_service_carries_the_oip_rest_and_grpc_ports_never_management(render, oip):
    ports = oip.one("Service", f"{RELEASE}-tsvk")["spec"]["ports"]
    assert ports == [
        {"name": "inference", "port": 8080, "targetPort": "inference", "protocol": "TCP"},
        {"name": "oip-rest", "port": 8000, "targetPort": "oip-rest", "protocol": "TCP", "appProtocol": "http"},
        {"name": "oip-grpc", "port": 8001, "targetPort": "oip-grpc", "protocol": "TCP", "appProtocol": "grpc"},
    ]
    # Management stays off the inference Service even when it is exposed on purpose (its own Service).
    exposed = render(_oip_with(config_with(management_address="http://0.0.0.0:8081", tsvk__oip__address="0.0.0.0",
                                           tsvk__oip__rest_port="8000", tsvk__oip__grpc_port="8001"),
                               service={"exposeManagement": True}))
    names = [port["name"] for port in exposed.one("Service", f"{RELEASE}-tsvk")["spec"]["ports"]]
    assert names == ["inference", "oip-rest", "oip-grpc"]
    assert [port["name"] for port in exposed.one("Service", "-management")["spec"]["ports"]] == ["management"]


def test_service_ports_are_values_and_target_the_front_ports_of_the_config(render):
    rendered = render(SCENARIOS["oip-gpu-download"])
    ports = {port["name"]: port for port in rendered.one("Service", f"{RELEASE}-tsvk")["spec"]["ports"]}
    assert (ports["oip-rest"]["port"], ports["oip-grpc"]["port"]) == (80, 81)
    container_ports = {port["name"]: port["containerPort"] for port in _front(rendered)["ports"]}
    assert container_ports == {"oip-rest": 9000, "oip-grpc": 9001}
    assert {ports["oip-rest"]["targetPort"], ports["oip-grpc"]["targetPort"]} == set(container_ports)


def test_front_runs_beside_torchserve_in_the_same_image(oip):
    containers = oip.pod_spec()["containers"]
    assert [c["name"] for c in containers] == ["torchserve", "oip-front"]
    assert containers[1]["image"] == containers[0]["image"]
    assert [p["name"] for p in containers[0]["ports"]] == ["inference"], "TorchServe's ports are unchanged"


def test_front_command_is_one_the_front_accepts(oip):
    """The container's command line goes through the front's own parser, and names the config the pod mounts."""
    from tsvk_tools.oip.server import build_parser

    front = _front(oip)
    assert front["command"] == ["python", "-m", "tsvk_tools.oip"]
    main = (Path(__file__).resolve().parents[2] / "tools" / "oip" / "__main__.py").read_text()
    assert "from .server import main" in main and "sys.exit(main())" in main
    args = build_parser().parse_args(front["args"])
    mount = next(m for m in front["volumeMounts"] if m["name"] == "config")
    assert mount["readOnly"] is True
    assert args.ts_config == Path(mount["mountPath"]) / CONFIG_FILE
    assert CONFIG_FILE in oip.one("ConfigMap", f"{RELEASE}-tsvk")["data"]
    assert str(args.run_dir) in {m["mountPath"] for m in front["volumeMounts"]}, "the run dir is a writable emptyDir"
    env = {item["name"]: item["value"] for item in front["env"]}
    assert env["PYTHONPATH"] == front_target(), "the front is imported from where the image installs it"


def test_readiness_is_the_oip_health_endpoint(oip):
    front, values = _front(oip), default_values()["probes"]
    assert front["readinessProbe"] == {"httpGet": {"path": "/v2/health/ready", "port": "oip-rest"}, **values["readiness"]}
    assert front["livenessProbe"] == {"httpGet": {"path": "/v2/health/live", "port": "oip-rest"}, **values["liveness"]}
    # TorchServe keeps its own probes: the startup probe still waits for every model's workers.
    assert oip.server()["startupProbe"]["exec"]["command"][1] == "/etc/tsvk/models-ready.py"
    assert oip.server()["readinessProbe"]["httpGet"] == {"path": "/ping", "port": "inference"}


def test_front_container_is_locked_down_and_sized_apart(oip):
    front = _front(oip)
    volumes = {v["name"]: v for v in oip.pod_spec()["volumes"]}
    assert front["securityContext"] == oip.server()["securityContext"]
    assert front["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in front["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert mounts["/tmp"]["name"] != next(m["name"] for m in oip.server()["volumeMounts"] if m["mountPath"] == "/tmp")
    store = mounts["/home/model-server/model-store"]
    assert store["name"] == "model-store" and store["readOnly"] is True, "the front reads each archive's settings"
    oip_values = default_values()["oip"]
    assert front["resources"] == {
        "requests": {"cpu": oip_values["cpu"], "memory": oip_values["memory"]},
        "limits": {"cpu": oip_values["cpu"], "memory": oip_values["memory"]},
    }
    assert not [key for key in front["resources"]["limits"] if "gpu" in key]


def test_network_policy_admits_the_oip_ports_from_the_inference_peers(oip):
    (rule,) = oip.one("NetworkPolicy", "-tsvk")["spec"]["ingress"]
    assert rule["ports"] == [{"port": name, "protocol": "TCP"} for name in ("inference", "oip-rest", "oip-grpc")]
    assert {"podSelector": {}} in rule["from"]


def test_helm_test_pod_also_infers_over_the_protocol(oip):
    container = oip.one("Pod", "test-prediction")["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["OIP_URL"] == f"http://{RELEASE}-tsvk:8000"
    script = container["command"][2]
    assert '"$OIP_URL/v2/health/ready"' in script and '"$OIP_URL/v2/models/$MODEL/infer"' in script
    assert '"datatype":"BYTES"' in script


def _without_oip_additions(rendered) -> list[dict]:
    """The rendering with exactly what protocol=oip adds taken out again."""
    documents = copy.deepcopy(rendered.documents)
    for doc in documents:
        if doc["kind"] == "Deployment":
            spec = doc["spec"]["template"]["spec"]
            spec["containers"] = [c for c in spec["containers"] if c["name"] != "oip-front"]
            spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "oip-tmp"]
            doc["spec"]["template"]["metadata"]["annotations"].pop("checksum/config")
        elif doc["kind"] == "ConfigMap":
            doc["data"].pop(CONFIG_FILE)
        elif doc["kind"] == "Service":
            doc["spec"]["ports"] = [p for p in doc["spec"]["ports"] if not p["name"].startswith("oip-")]
        elif doc["kind"] == "NetworkPolicy":
            for rule in doc["spec"].get("ingress", []) + doc["spec"].get("egress", []):
                rule["ports"] = [p for p in rule["ports"] if not str(p["port"]).startswith("oip-")]
        elif doc["kind"] == "Pod":
            container = doc["spec"]["containers"][0]
            container["env"] = [e for e in container["env"] if e["name"] != "OIP_URL"]
            lines = container["command"][2].splitlines(keepends=True)
            first_oip = next((i for i, line in enumerate(lines) if "$OIP_URL" in line), len(lines))
            container["command"][2] = "".join(lines[:first_oip])
    return documents


def test_oip_mode_only_adds_to_the_default_rendering(render, oip):
    default = render()
    assert _without_oip_additions(oip) == _without_oip_additions(default)
    assert len(oip.documents) == len(default.documents)


def test_default_mode_runs_no_front(render):
    rendered = render()
    assert [c["name"] for c in rendered.pod_spec()["containers"]] == ["torchserve"]
    assert not [v for v in rendered.pod_spec()["volumes"] if v["name"].startswith("oip")]
    pod = rendered.one("Pod", "test-prediction")["spec"]["containers"][0]
    assert "OIP_URL" not in json.dumps(pod["env"]) + pod["command"][2]
    assert render({"protocol": "predictions"}).documents == rendered.documents


def test_values_defaults_are_tsvks():
    from tsvk_tools import defaults

    values = default_values()
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert values["protocol"] == defaults.PROTOCOL
    assert tuple(schema["properties"]["protocol"]["enum"]) == defaults.PROTOCOLS
    assert (values["service"]["oipRestPort"], values["service"]["oipGrpcPort"]) == (defaults.OIP_REST_PORT, defaults.OIP_GRPC_PORT)
    for line in OIP_CONFIG.splitlines()[-4:]:
        assert line.startswith("tsvk.oip."), line


def test_schema_rejects_an_unknown_protocol(render_error, helm):
    error = render_error({"protocol": "v2"})
    assert "/protocol" in error and "'predictions', 'oip'" in error
    linted = run_helm(helm, ["lint", "--strict", str(CHART), "--set", "protocol=grpc"])
    assert linted.returncode != 0 and "'predictions', 'oip'" in linted.stdout


def test_oip_mode_needs_an_oip_config(render_error):
    error = render_error({"protocol": "oip"})
    assert "protocol is oip but the config lacks tsvk.oip.rest_port" in error
    assert "--protocol oip --oip-address 0.0.0.0" in error and "make helm-template HELM_PROTOCOL=oip" in error


def test_an_oip_config_needs_protocol_oip(render_error):
    error = render_error({"torchserve": {"configProperties": OIP_CONFIG}})
    assert "tsvk.oip.rest_port=8000" in error and "protocol is predictions" in error and "set protocol=oip" in error


def test_front_must_listen_beyond_loopback(render_error):
    error = render_error(_oip_with(OIP_CONFIG.replace("tsvk.oip.address=0.0.0.0", "tsvk.oip.address=127.0.0.1")))
    assert 'tsvk.oip.address must be 0.0.0.0 so the Service can reach the front, got "127.0.0.1"' in error


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"tsvk__oip__rest_port": "8080"}, "tsvk.oip.rest_port 8080 is also the config's inference_address"),
        ({"tsvk__oip__grpc_port": "7070"}, "tsvk.oip.grpc_port 7070 is also the config's grpc_inference_port"),
        ({"tsvk__oip__grpc_port": "8000"}, "tsvk.oip.rest_port and tsvk.oip.grpc_port are both 8000"),
    ],
)
def test_front_ports_must_differ_from_every_other_port_of_the_pod(render_error, changes, fragment):
    config = OIP_CONFIG
    for key, value in changes.items():
        key = key.replace("__", ".")
        config = re.sub(rf"^{re.escape(key)}=.*$", f"{key}={value}", config, flags=re.MULTILINE)
    assert fragment in render_error(_oip_with(config))


def test_values_yaml_documents_the_switch():
    text = (CHART / "values.yaml").read_text()
    assert "protocol: predictions" in text and "HELM_PROTOCOL=oip" in text
    assert yaml.safe_load(text)["oip"].keys() == {"cpu", "memory"}
