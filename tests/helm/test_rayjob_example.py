"""k8s/ray/rayjob-batch.yaml is a valid KubeRay RayJob: it validates against the openAPIV3Schema of the
`ray.io/v1` RayJob CRD that KubeRay v1.7.0 installs (ray-operator/config/crd/bases/ray.io_rayjobs.yaml,
Apache-2.0; its v1 schema stored as gzipped JSON in tests/helm/schemas), with every field known to the
schema (an API server with strict field validation refuses unknown ones), and its entrypoint is a
`tsvk batch --ray` command line that parses with the real `tsvk` parser."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.crd import load_schema, unknown_fields
from tsvk_tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "k8s" / "ray" / "rayjob-batch.yaml"
SCHEMA = Path(__file__).parent / "schemas" / "kuberay-v1.7.0-rayjob-v1.json.gz"


@pytest.fixture(scope="module")
def schema() -> dict:
    return load_schema(SCHEMA)


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_validates_against_kuberays_rayjob_schema(rayjob, schema):
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    jsonschema.validate(rayjob, schema)
    assert unknown_fields(rayjob, schema) == []


def test_the_check_finds_a_misspelt_or_mistyped_field(rayjob, schema):
    """The checks above can fail: a typo in a field name and a wrong type are both caught."""
    misspelt = json.loads(json.dumps(rayjob))
    misspelt["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert unknown_fields(misspelt, schema) == [".spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].volumeMount"]
    mistyped = json.loads(json.dumps(rayjob))
    mistyped["spec"]["shutdownAfterJobFinishes"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(mistyped, schema)


def test_the_entrypoint_is_a_tsvk_batch_command_on_ray_writing_to_the_shared_volume(rayjob):
    argv = shlex.split(rayjob["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "tsvk_tools.cli"]
    args = build_parser().parse_args(argv[3:])
    assert (args.command, args.ray) == ("batch", "auto")
    mounts = {m["mountPath"] for group in [rayjob["spec"]["rayClusterSpec"]["headGroupSpec"],
                                           *rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"] for m in c["volumeMounts"]}
    assert mounts == {"/data"}
    assert all(str(p).startswith("/data/") for p in (args.archive, args.input, args.output))
