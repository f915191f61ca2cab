"""k8s/kserve/: a ServingRuntime and an InferenceService that serve tsvk archives with the kserve engine on a
cluster running KServe. Each validates against the openAPIV3Schema of KServe v0.16.0's own CRD
(tests/helm/schemas/KSERVE.md says where they come from) with `jsonschema`, with every field known to the schema;
the runtime's command line parses with the image's entrypoint parser; and the config the migration steps of
k8s/README.md write is one this runtime serves (its port, model store and authorization)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.crd import load_schema, unknown_fields
from tsvk.common.properties import read_properties
from tsvk_tools.cli import build_parser as tsvk_parser
from tsvk_tools.lab.kube_check.kserve_runtime import migration_config_command, runtime_pod
from tsvk_tools.engines import container

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "k8s" / "kserve"
SCHEMAS = Path(__file__).parent / "schemas"
STORAGE = "/mnt/models"  # where KServe's storage initializer puts the storageUri's files
KINDS = {
    "servingruntime.yaml": ("serving.kserve.io/v1alpha1", "ServingRuntime", "kserve-v0.16.0-servingruntime-v1alpha1.json.gz"),
    "inferenceservice.yaml": ("serving.kserve.io/v1beta1", "InferenceService", "kserve-v0.16.0-inferenceservice-v1beta1.json.gz"),
}


def manifest(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text())


def schema(name: str) -> dict:
    return load_schema(SCHEMAS / KINDS[name][2])


def problems(document: dict, name: str) -> list[str]:
    """What an API server with strict field validation would refuse: schema errors, then unknown fields."""
    found = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in jsonschema.Draft7Validator(schema(name)).iter_errors(document)]
    return found + [f"unknown field {f}" for f in unknown_fields(document, schema(name))]


@pytest.fixture(scope="module")
def runtime() -> dict:
    return manifest("servingruntime.yaml")


@pytest.fixture(scope="module")
def service() -> dict:
    return manifest("inferenceservice.yaml")


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_manifest_validates_against_kserves_crd_schema(name):
    document = manifest(name)
    assert (document["apiVersion"], document["kind"]) == KINDS[name][:2]
    assert problems(document, name) == []


@pytest.mark.parametrize(("name", "path", "value", "expected"), [
    ("servingruntime.yaml", ("spec", "containers", 0, "arg"), ["--engine"], "unknown field .spec.containers[0].arg"),
    ("servingruntime.yaml", ("spec", "supportedModelFormat"), [], "unknown field .spec.supportedModelFormat"),
    ("servingruntime.yaml", ("spec", "protocolVersions"), "v2", "protocolVersions: 'v2' is not of type 'array'"),
    ("servingruntime.yaml", ("spec", "containers", 0, "ports", 0, "containerPort"), "8080", "is not of type 'integer'"),
    ("inferenceservice.yaml", ("spec", "predictor", "model", "storageURI"), "gs://x", "unknown field .spec.predictor.model.storageURI"),
    ("inferenceservice.yaml", ("spec", "predictor", "minReplicas"), "one", "minReplicas: 'one' is not of type 'integer'"),
])
def test_a_wrong_field_or_type_is_refused(name, path, value, expected):
    """The checks above can fail: a misspelt field and a wrong type are both found."""
    document = copy.deepcopy(manifest(name))
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert any(expected in problem for problem in problems(document, name)), problems(document, name)


def test_the_service_asks_for_this_runtime_its_format_and_protocol(runtime, service):
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats and "pytorch" not in formats, "pytorch stays KServe's own runtime's"
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def _container(runtime: dict) -> dict:
    (only,) = runtime["spec"]["containers"]
    assert only["name"] == "kserve-container", "KServe merges the predictor's model into the container of this name"
    return only


def test_the_runtime_runs_the_images_entrypoint_on_the_kserve_engine(runtime):
    """The command line parses with the image's PID 1 parser and picks the engine, on the storageUri's config."""
    server = _container(runtime)
    assert server["command"] == ["python", "-m", "tsvk_tools.engines.container"]
    parser = container.argparse.ArgumentParser()
    container.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["run-container", *server["args"]])
    assert args.engine == "kserve"
    assert str(args.config) == f"{STORAGE}/config/config.properties"
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    assert str(args.run_dir) in mounts and "/tmp" in mounts, "the run dir and /tmp are writable on a read-only root"
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["PYTHONPATH"] == "/opt/tsvk" and env["TS_CONFIG_FILE"] == str(args.config)


def test_the_runtime_serves_no_metrics_so_it_announces_none(runtime):
    annotations = runtime["spec"].get("annotations", {})
    assert not [key for key in annotations if key.startswith("prometheus.")]


def test_the_image_is_the_charts(runtime):
    chart = yaml.safe_load((ROOT / "k8s" / "tsvk" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "k8s" / "tsvk" / "values.yaml").read_text())
    assert _container(runtime)["image"] == f"{values['image']['repository']}:{chart['appVersion']}-cpu-kserve", "the image without Java"


def test_the_grace_period_covers_the_drain(runtime, service):
    args = _container(runtime)["args"]
    drain = int(args[args.index("--drain-timeout") + 1])
    assert service["spec"]["predictor"]["terminationGracePeriodSeconds"] >= drain + 10


def test_the_readmes_config_is_one_the_runtime_serves(runtime, tmp_path):
    """Port, model store and authorization of the config the migration writes agree with the runtime."""
    argv = migration_config_command()
    assert argv[:2] == ["--models", "resnet50"]
    output = tmp_path / "config.properties"
    args = tsvk_parser().parse_args(["config", *argv, "--output", str(output)])
    assert args.func(args) in (0, None)
    properties = read_properties(output)
    (port,) = _container(runtime)["ports"]
    assert properties["inference_address"] == f"http://0.0.0.0:{port['containerPort']}"
    assert properties["model_store"] == f"{STORAGE}/model-store"
    assert properties["disable_token_authorization"] == "true", "KServe's router sends no tsvk key"
    assert properties["models"], "the engine serves the archives of the config's models= line"


def test_the_runtime_check_plays_the_runtimes_own_container(runtime):
    """make kserve-runtime-check changes nothing of the container but its image, and mounts the storage read-only."""
    pod = runtime_pod(runtime, "localhost/tsvk/torchserve@sha256:" + "1" * 64)
    (played,) = pod["spec"]["containers"]
    original = _container(runtime)
    assert {k: v for k, v in played.items() if k not in ("image", "volumeMounts")} == {
        k: v for k, v in original.items() if k not in ("image", "volumeMounts")}
    assert played["volumeMounts"][:-1] == original["volumeMounts"]
    assert played["volumeMounts"][-1] == {"name": "kserve-provision-location", "mountPath": STORAGE, "readOnly": True}
