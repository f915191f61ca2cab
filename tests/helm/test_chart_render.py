"""Render the chart for each value set, validate every manifest, and check the fields that matter."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.helm_scenarios import SCENARIOS, SHA256_OF_ARCHIVE
from tests.support.helm import NAMESPACE, RELEASE, config_with

pytestmark = pytest.mark.helm

SCHEMAS = Path(__file__).parent / "schemas"
# Custom resources kubernetes-validate has no schema for, and the schema each is checked against instead.
CUSTOM_RESOURCE_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1.json"}
SERVER_SELECTOR = {
    "app.kubernetes.io/name": "tsvk",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "server",
}


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request, render):
    return request.param, render(SCENARIOS[request.param])


def test_every_manifest_validates_against_kubernetes_schemas(scenario, kubernetes_versions, tmp_path):
    name, rendered = scenario
    core = [doc for doc in rendered.documents if (doc["apiVersion"], doc["kind"]) not in CUSTOM_RESOURCE_SCHEMAS]
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text("\n---\n".join(json.dumps(doc) for doc in core))
    versions = [arg for version in kubernetes_versions for arg in ("--kubernetes-version", version)]
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", *versions, str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # A kind without a schema only warns; here every non-custom kind must have been checked.
    assert "WARN" not in result.stdout, result.stdout
    assert result.stdout.count("passed") == len(core) * len(kubernetes_versions)


def _custom_resources(rendered) -> list[tuple[dict, dict]]:
    """(manifest, its schema) for every custom resource of a rendering."""
    return [(doc, json.loads(CUSTOM_RESOURCE_SCHEMAS[(doc["apiVersion"], doc["kind"])].read_text()))
            for doc in rendered.documents if (doc["apiVersion"], doc["kind"]) in CUSTOM_RESOURCE_SCHEMAS]


def _monitored(name: str) -> bool:
    return SCENARIOS[name].get("serviceMonitor", {}).get("enabled", False)


def test_a_service_monitor_is_rendered_exactly_when_asked_for(scenario):
    name, rendered = scenario
    assert len(rendered.all("ServiceMonitor")) == (1 if _monitored(name) else 0)


@pytest.mark.parametrize("name", sorted(filter(_monitored, SCENARIOS)))
def test_custom_resources_validate_against_their_schemas(render, name, kubernetes_versions):
    import jsonschema  # installed with kubernetes-validate, which the kubernetes_versions fixture requires

    resources = _custom_resources(render(SCENARIOS[name]))
    assert resources, f"scenario {name} renders no custom resource to check"
    for doc, schema in resources:
        jsonschema.validate(doc, schema)


def test_custom_resource_schema_catches_an_unknown_field(render, kubernetes_versions):
    """The ServiceMonitor schema is not a rubber stamp either: a misspelt endpoint field fails."""
    import jsonschema

    [(monitor, schema)] = _custom_resources(render(SCENARIOS["monitoring"]))
    monitor["spec"]["endpoints"][0]["scrapeIntervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="scrapeIntervall"):
        jsonschema.validate(monitor, schema)


def test_strict_validation_catches_an_unknown_field(render, kubernetes_versions):
    """The validator is not a rubber stamp: a misspelt field in a rendered Deployment fails."""
    from kubernetes_validate import utils

    deployment = render().one("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = {}
    with pytest.raises(utils.ValidationError):
        utils.validate(deployment, kubernetes_versions[-1], strict=True)


def test_selectors_agree_and_select_only_server_pods(scenario):
    _, rendered = scenario
    deployment = rendered.one("Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == SERVER_SELECTOR
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert SERVER_SELECTOR.items() <= pod_labels.items()
    for service in rendered.all("Service"):
        assert service["spec"]["selector"] == SERVER_SELECTOR, service["metadata"]["name"]
    if rendered.has("PodDisruptionBudget"):
        assert rendered.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == SERVER_SELECTOR
    if rendered.has("NetworkPolicy"):
        assert rendered.one("NetworkPolicy", "-tsvk")["spec"]["podSelector"]["matchLabels"] == SERVER_SELECTOR
    if rendered.has("HorizontalPodAutoscaler"):
        target = rendered.one("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    test_pod = rendered.one("Pod", "test-prediction")
    assert not SERVER_SELECTOR.items() <= test_pod["metadata"]["labels"].items(), "the ReplicaSet would adopt the test pod"


def test_config_map_holds_the_config_the_pods_read(scenario):
    name, rendered = scenario
    config = rendered.one("ConfigMap", f"{RELEASE}-tsvk")["data"]["config.properties"]
    expected = SCENARIOS[name].get("torchserve", {}).get("configProperties")
    if expected:
        assert config.strip() == expected.strip()
    server = rendered.server()
    env = {item["name"]: item.get("value") for item in server["env"]}
    assert env["TS_CONFIG_FILE"] == "/etc/tsvk/config.properties"
    assert {"mountPath": "/etc/tsvk", "name": "config", "readOnly": True} in server["volumeMounts"]


def test_cpu_request_and_limit_match_the_threads_of_the_config(scenario):
    _, rendered = scenario
    config = rendered.one("ConfigMap", f"{RELEASE}-tsvk")["data"]["config.properties"]
    intra = int(re.search(r"^tsvk\.threads\.\w+=(\d+),\d+$", config, re.MULTILINE).group(1))
    workers = json.loads(re.search(r"^models=(.*)$", config, re.MULTILINE).group(1))["resnet50"]["1.0"]["maxWorkers"]
    resources = rendered.server()["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == str(workers * intra)
    assert resources["requests"]["memory"] == resources["limits"]["memory"]


def test_probes_ping_the_inference_port_once_the_models_are_loaded(scenario):
    name, rendered = scenario
    server = rendered.server()
    assert [p for p in server["ports"] if p["name"] == "inference"] == [
        {"name": "inference", "containerPort": 8080, "protocol": "TCP"}
    ]
    for probe in ("readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/ping", "port": "inference"}, probe
    startup = server["startupProbe"]
    # Where the script asks: TorchServe's management API on the pod's loopback, or the kserve engine's status file.
    source = "/home/model-server/run/engine-status.json" if _engine(name) == "kserve" else "http://127.0.0.1:8081"
    assert startup["exec"]["command"] == ["python", "/etc/tsvk/models-ready.py", source, "resnet50"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, "slow model loads need minutes"
    config_map = rendered.one("ConfigMap", f"{RELEASE}-tsvk")
    assert config_map["data"]["models-ready.py"].startswith('"""Startup probe')


def test_gpu_fields_appear_only_when_gpu_is_on(scenario):
    name, rendered = scenario
    spec = rendered.pod_spec()
    limits = rendered.server()["resources"]["limits"]
    gpu_on = SCENARIOS[name].get("gpu", {}).get("enabled", False)
    if gpu_on:
        assert limits["nvidia.com/gpu"] == "1"
        assert "nvidia.com/gpu" not in rendered.server()["resources"]["requests"]
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert rendered.server()["image"].endswith(":0.12.0-gpu")
    else:
        assert not [key for key in limits if "gpu" in key]
        assert "runtimeClassName" not in spec
        assert "nvidia" not in json.dumps(spec.get("nodeSelector", {})) + json.dumps(spec.get("tolerations", []))
        if "image" not in SCENARIOS[name]:  # the chart's own tag (kserve: the image without Java); a pushed one has its digest
            assert rendered.server()["image"].endswith(":0.12.0-cpu-kserve" if _engine(name) == "kserve" else ":0.12.0-cpu")


def test_inference_service_carries_the_inference_port_and_only_the_oip_ports_besides(scenario):
    name, rendered = scenario
    ports = rendered.one("Service", f"{RELEASE}-tsvk")["spec"]["ports"]
    assert ports[0] == {"name": "inference", "port": 8080, "targetPort": "inference", "protocol": "TCP"}
    expected_besides = ["oip-rest", "oip-grpc"] if SCENARIOS[name].get("protocol") == "oip" else []
    assert [port["name"] for port in ports[1:]] == expected_besides


def test_management_and_metrics_stay_inside_the_pod_by_default(render):
    rendered = render()
    assert [s["metadata"]["name"] for s in rendered.all("Service")] == [f"{RELEASE}-tsvk"]
    assert [p["name"] for p in rendered.server()["ports"]] == ["inference"]
    config = rendered.one("ConfigMap")["data"]["config.properties"]
    assert "management_address=http://127.0.0.1:8081" in config
    assert "metrics_address=http://127.0.0.1:8082" in config


def test_metrics_get_a_headless_service_of_their_own_when_monitored(render):
    rendered = render(SCENARIOS["monitoring"])
    metrics = rendered.one("Service", "-metrics")
    assert metrics["spec"]["clusterIP"] == "None"
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 8082, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = rendered.one("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The ServiceMonitor must not select the inference Service.
    inference = rendered.one("Service", f"{RELEASE}-tsvk")
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= inference["metadata"]["labels"].items()


def test_pods_run_as_non_root_with_a_read_only_root(scenario):
    name, rendered = scenario
    spec = rendered.pod_spec()
    assert spec["securityContext"]["runAsNonRoot"] is True
    # The image's model-server user: UID and GID 10000, above any user of the node itself.
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (10000, 10000)
    assert spec["securityContext"]["fsGroup"] == 10000
    assert spec["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in spec["containers"] + spec.get("initContainers", []):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in rendered.server()["volumeMounts"]}
    java_tmp = ("/home/model-server/run/tmp",) if _engine(name) == "torchserve" else ()
    for writable in ("/tmp", "/home/model-server/run", "/home/model-server/run/logs", *java_tmp):
        assert "emptyDir" in volumes[mounts[writable]], writable


def _engine(scenario_name: str) -> str:
    return SCENARIOS[scenario_name].get("engine", "torchserve")


@pytest.mark.parametrize("allocator, preload", [(None, None), ("jemalloc", "libjemalloc.so.2"), ("glibc", None)])
def test_torchserve_runs_on_the_allocator_asked_for(render, allocator, preload):
    values = {} if allocator is None else {"torchserve": {"allocator": allocator}}
    env = {e["name"]: e.get("value") for e in render(values).server()["env"]}
    assert env.get("LD_PRELOAD") == preload


def test_the_image_installs_the_preloaded_allocator():
    recipe = (Path(__file__).parents[2] / "k8s" / "image" / "Dockerfile").read_text()
    assert re.search(r"apt-get install[^;]*\blibjemalloc2\b", recipe)


def test_an_unknown_allocator_is_refused_by_the_schema(render_error):
    assert "allocator" in render_error({"torchserve": {"allocator": "tcmalloc"}})


def test_model_store_comes_from_a_claim_or_the_download_init_container(render):
    created = render().pod_spec()
    claim = render(SCENARIOS["existing-claim"]).pod_spec()
    download = render(SCENARIOS["download"]).pod_spec()

    def store(spec):
        return next(v for v in spec["volumes"] if v["name"] == "model-store")

    assert store(created)["persistentVolumeClaim"] == {"claimName": f"{RELEASE}-tsvk-model-store"}
    assert store(claim)["persistentVolumeClaim"] == {"claimName": "team-models"}
    assert "emptyDir" in store(download)
    assert "initContainers" not in created and "initContainers" not in claim
    assert not render(SCENARIOS["existing-claim"]).has("PersistentVolumeClaim")
    pvc = render().one("PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    mount = next(m for m in download["containers"][0]["volumeMounts"] if m["name"] == "model-store")
    assert mount == {"name": "model-store", "mountPath": "/home/model-server/model-store", "readOnly": True}


def test_init_container_downloads_and_checks_sha256(render):
    init = render(SCENARIOS["download"]).pod_spec()["initContainers"]
    assert [c["name"] for c in init] == ["fetch-archives"]
    fetch = init[0]
    # The chart's own image (curl and sha256sum are in it): no second image to trust.
    assert fetch["image"] == render(SCENARIOS["download"]).server()["image"]
    assert fetch["imagePullPolicy"] == render(SCENARIOS["download"]).server()["imagePullPolicy"]
    script = fetch["command"][2]
    assert "sha256sum -c" in script and "exit 1" in script
    assert fetch["args"] == [
        "/home/model-server/model-store",
        "resnet50",
        "https://models.example.com/resnet50.mar",
        SHA256_OF_ARCHIVE,
    ]
    # URLs travel as arguments, never inside the script, so a value cannot inject shell.
    assert "models.example.com" not in script


def test_network_policy_admits_only_the_listed_peers(render):
    default = render().one("NetworkPolicy", "-tsvk")["spec"]
    assert default["policyTypes"] == ["Ingress", "Egress"]
    assert [rule["ports"] for rule in default["ingress"]] == [[{"port": "inference", "protocol": "TCP"}]]
    assert {"podSelector": {}} in default["ingress"][0]["from"]

    strict = render(SCENARIOS["network-policy-peers"]).one("NetworkPolicy", "-tsvk")["spec"]["ingress"]
    inference, management = strict
    assert {"podSelector": {}} not in inference["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}} in inference["from"]
    assert management == {
        "ports": [{"port": "management", "protocol": "TCP"}],
        "from": [{"podSelector": {"matchLabels": {"role": "model-admin"}}}],
    }
    test_pod_labels = render().one("Pod", "test-prediction")["metadata"]["labels"]
    test_pod_peer = inference["from"][0]["podSelector"]["matchLabels"]
    assert test_pod_peer.items() <= test_pod_labels.items(), "helm test must still reach the pods"

    monitored = render(SCENARIOS["monitoring"]).one("NetworkPolicy", "-tsvk")["spec"]["ingress"]
    assert monitored[1]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert not render(SCENARIOS["network-policy-off-fixed-replicas"]).has("NetworkPolicy")


def test_management_service_appears_only_when_asked(render):
    rendered = render(SCENARIOS["network-policy-peers"])
    management = rendered.one("Service", "-management")
    assert management["spec"]["ports"][0]["port"] == 8081
    assert "management" in [p["name"] for p in rendered.server()["ports"]]


def test_hpa_scales_on_cpu_and_on_the_custom_metric(render):
    default = render().one("HorizontalPodAutoscaler")["spec"]
    assert default["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]
    custom = render(SCENARIOS["hpa-custom-metric"]).one("HorizontalPodAutoscaler")["spec"]["metrics"]
    assert custom[1] == {
        "type": "Pods",
        "pods": {
            "metric": {"name": "tsvk_queue_latency_microseconds"},
            "target": {"type": "AverageValue", "averageValue": "100000"},
        },
    }
    assert "replicas" not in render().one("Deployment")["spec"], "the HPA owns the replica count"
    fixed = render(SCENARIOS["network-policy-off-fixed-replicas"])
    assert fixed.one("Deployment")["spec"]["replicas"] == 3
    assert not fixed.has("HorizontalPodAutoscaler") and not fixed.has("PodDisruptionBudget")


def test_pdb_never_blocks_a_drain_of_a_single_replica(render):
    assert render().one("PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": SERVER_SELECTOR},
    }


def test_helm_test_pod_pings_and_predicts_with_a_real_jpeg(render):
    import base64

    pod = render().one("Pod", "test-prediction")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["BASE_URL"] == f"http://{RELEASE}-tsvk:8080"
    assert env["MODEL"] == "resnet50"
    assert base64.b64decode(env["IMAGE_BASE64"])[:3] == b"\xff\xd8\xff", "a JPEG"
    script = container["command"][2]
    assert '"$BASE_URL/ping"' in script and '"$BASE_URL/predictions/$MODEL"' in script
    assert "--fail" in script


def test_dashboard_plots_the_metric_names_from_values(render):
    values = dict(SCENARIOS["monitoring"])
    values["grafanaDashboard"] = {
        "enabled": True,
        "metrics": {"preprocessMs": "x_pre_ms", "inferenceMs": "x_infer_ms", "batchSize": "x_batch"},
    }
    board_map = render(values).one("ConfigMap", "-dashboard")
    assert board_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (board_json,) = board_map["data"].values()
    board = json.loads(board_json)
    titles = [panel["title"] for panel in board["panels"]]
    for wanted in ("Requests per second", "Latency percentiles", "queue", "Batch size", "Preprocessing", "Inference"):
        assert any(wanted.lower() in title.lower() for title in titles), wanted
    exprs = " ".join(t["expr"] for panel in board["panels"] for t in panel["targets"])
    for metric in ("x_pre_ms", "x_infer_ms", "x_batch", "ts_inference_requests_total", "ts_queue_latency_microseconds"):
        assert metric in exprs, metric
    assert "TsvkPreprocessMs" not in exprs
    assert f'namespace="{NAMESPACE}",service="{RELEASE}-tsvk-metrics"' in exprs
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_reads_histograms_when_the_handler_sends_them(render):
    values = dict(SCENARIOS["monitoring"])
    values["grafanaDashboard"] = {"enabled": True, "handlerMetricType": "histogram"}
    (board_json,) = render(values).one("ConfigMap", "-dashboard")["data"].values()
    exprs = [t["expr"] for panel in json.loads(board_json)["panels"] for t in panel["targets"]]
    assert any("histogram_quantile(0.95" in e and "TsvkInferenceMs_bucket" in e for e in exprs)


def test_set_file_config_reaches_the_config_map(render, tmp_path):
    """What make helm-template does: the generated file goes in with --set-file."""
    generated = tmp_path / "config.properties"
    generated.write_text(config_with(models=json.dumps(
        {"resnet50": {"1.0": {"marName": "resnet50.mar", "minWorkers": 2, "maxWorkers": 2, "batchSize": 4}}}
    ), tsvk__threads__resnet50="4,1"))
    rendered = render(
        {"torchserve": {"vcpus": 8, "workers": 2, "batchSize": 4}},
        files={"torchserve.configProperties": generated},
    )
    assert rendered.one("ConfigMap")["data"]["config.properties"].strip() == generated.read_text().strip()
    assert rendered.server()["resources"]["limits"]["cpu"] == "8"


def test_pid_1_is_the_draining_entrypoint_and_the_grace_period_follows_the_drain(render):
    """SIGTERM goes to `tsvk run-container` (tools/engines/container.py), which drains for drainTimeoutSeconds;
    SIGKILL comes only after the preStop sleep, the drain and room for TorchServe to exit."""
    from tsvk_tools import defaults

    for values, drain, grace in (({}, defaults.DRAIN_TIMEOUT_S, 10 + defaults.DRAIN_TIMEOUT_S + 10),
                                 ({"drainTimeoutSeconds": 90, "preStopSleepSeconds": 5}, 90, 105)):
        rendered = render(values)
        server = rendered.server()
        assert server["command"] == ["python", "-m", "tsvk_tools.engines.container"]
        args = server["args"]
        assert args[args.index("--drain-timeout") + 1] == str(drain)
        assert args[args.index("--config") + 1] == "/etc/tsvk/config.properties"
        assert rendered.pod_spec()["terminationGracePeriodSeconds"] == grace
        assert grace > values.get("preStopSleepSeconds", 10) + drain + defaults.STOP_GRACE_S


def test_the_run_dir_holds_what_torchserve_writes_and_fits_the_worker_sockets(render):
    from tsvk_tools.engines.torchserve.server import check_worker_socket_path

    args = render({}).server()["args"]
    check_worker_socket_path(Path(args[args.index("--run-dir") + 1]))
