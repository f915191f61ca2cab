"""The config values.yaml ships is exactly what `tsvk config` writes for the chart's default values.

Runs the real generator through the real make target (k8s/helm.mk helm-config), so neither the default
nor the make recipe can drift from the CLI.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest
from tests.support.helm import REPO, default_config, default_values

pytestmark = pytest.mark.helm


def with_models(variables: tuple[str, ...]) -> tuple[str, ...]:
    """The chart's default model where none is named (none named: the archives in model_store/, none in a test)."""
    named = any(v.startswith(("HELM_MODELS=", "MODELS=")) for v in variables)
    return variables if named else ("HELM_MODELS=resnet50", *variables)


@pytest.fixture(scope="module")
def generate(tmp_path_factory):
    if importlib.util.find_spec("tsvk_tools.config.serving_config") is None:
        pytest.skip("tsvk_tools.config.serving_config is not installed (pip install -e .)")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def _generate(*variables: str) -> str:
        build = tmp_path_factory.mktemp("helm-build")
        result = subprocess.run(
            ["make", "--no-print-directory", "-f", "k8s/helm.mk", "helm-config", f"PYTHON={sys.executable}",
             f"HELM_BUILD={build}", *with_models(variables)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return (build / "config.properties").read_text()

    return _generate


def test_values_yaml_default_is_the_generated_config(generate):
    torchserve = default_values()["torchserve"]
    generated = generate(
        f"HELM_VCPUS={torchserve['vcpus']}", f"HELM_WORKERS={torchserve['workers']}", f"HELM_BATCH={torchserve['batchSize']}"
    )
    assert generated == default_config(), (
        "k8s/tsvk/values.yaml torchserve.configProperties differs from `make helm-config`; "
        "paste build/helm/config.properties into it"
    )


@pytest.mark.parametrize(
    "variables, values",
    [
        (("HELM_VCPUS=8", "HELM_WORKERS=2", "HELM_BATCH=16"), {"torchserve": {"vcpus": 8, "workers": 2, "batchSize": 16}}),
        (("HELM_VCPUS=4", "HELM_GPUS=1"), {"torchserve": {"vcpus": 4}, "gpu": {"enabled": True, "count": 1}}),
        (("HELM_VCPUS=4", "HELM_WORKERS=1", "HELM_MODELS=resnet50,vit_b_16"), {"torchserve": {"vcpus": 4}}),
        (("HELM_METRICS_ADDRESS=http://0.0.0.0:8082",), {"serviceMonitor": {"enabled": True}}),
        (("HELM_PROTOCOL=oip",), {"protocol": "oip"}),
    ],
)
def test_generated_configs_pass_the_chart_checks(generate, render, variables, values):
    config = generate(*variables)
    rendered = render({**values, "torchserve": {**values.get("torchserve", {}), "configProperties": config}})
    assert rendered.one("ConfigMap")["data"]["config.properties"].strip() == config.strip()


def test_oip_config_starts_the_front_on_every_interface_of_the_pod(generate, render):
    """What make helm-template HELM_PROTOCOL=oip renders: the front's ports from the config, on 0.0.0.0."""
    config = generate("HELM_PROTOCOL=oip")
    assert "tsvk.oip.address=0.0.0.0" in config.splitlines()
    front = next(c for c in render({"protocol": "oip", "torchserve": {"configProperties": config}}).pod_spec()["containers"]
                 if c["name"] == "oip-front")
    rest = int(next(line for line in config.splitlines() if line.startswith("tsvk.oip.rest_port=")).split("=")[1])
    assert {"name": "oip-rest", "containerPort": rest, "protocol": "TCP"} in front["ports"]
