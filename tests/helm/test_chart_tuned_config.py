"""A config `tsvk tune` wrote deploys through the chart: `make helm-template HELM_TUNED=...` regenerates it
for the pod with the tuned numbers, and sizes the chart's values from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from tests.support.helm import REPO

from tsvk_tools.errors import UsageError
from tsvk_tools.config.rendering import write_plan
from tsvk_tools.config.serving_config import ModelChoice, ServingRequest, plan_with_choices
from tsvk_tools.tune.chart import chart_values

pytestmark = pytest.mark.helm


def tuned_config(path, choices: dict[str, ModelChoice]):
    request = ServingRequest(vcpus=4, gpus=0, models=tuple(choices), archive_check=False)
    write_plan(plan_with_choices(request, choices, origin="tsvk tune"), path)
    return path


def test_helm_template_deploys_a_tuned_config(helm, tmp_path):
    tuned = tuned_config(tmp_path / "tuned.properties", {"resnet50": ModelChoice(2, 1, 1, 4, 20, "2 worker(s): 9.9 img/s")})
    build = tmp_path / "helm"
    result = subprocess.run(["make", "--no-print-directory", "-f", "k8s/helm.mk", "helm-template", f"PYTHON={sys.executable}",
                             f"HELM={helm}", f"HELM_BUILD={build}", f"HELM_TUNED={tuned}", "MODELS=resnet50"],
                            cwd=REPO, capture_output=True, text=True, check=False, env={**os.environ})
    assert result.returncode == 0, result.stdout + result.stderr
    config = (build / "config.properties").read_text()
    assert "tsvk.tuned.resnet50=2 worker(s): 9.9 img/s" in config and "tsvk.threads.resnet50=1,1" in config
    assert "model_store=/home/model-server/model-store" in config and "disable_token_authorization=true" in config
    documents = [d for d in yaml.safe_load_all((build / "manifests.yaml").read_text()) if d]
    configmap = next(d for d in documents if d["kind"] == "ConfigMap" and "config.properties" in d.get("data", {}))
    assert configmap["data"]["config.properties"].strip() == config.strip()
    container = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == "2"  # 2 workers x 1 thread
    assert re.search(r'"maxWorkers":2', config) and re.search(r'"batchSize":4', config)


def test_models_tuned_to_different_workers_cannot_share_the_charts_values():
    choices = {"a": ModelChoice(2, 1, 1, 8, 20), "b": ModelChoice(1, 2, 1, 8, 20)}
    with pytest.raises(UsageError, match="separate releases"):
        chart_values(choices)
    assert chart_values({"a": ModelChoice(2, 1, 1, 8, 20), "b": ModelChoice(2, 1, 1, 8, 5)}) == {"vcpus": 4, "workers": 2, "batchSize": 8}
