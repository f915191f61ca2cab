"""k8s/helm.mk: every target is listed by `make help`, and the commands it would run are the right ones."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from helm_support import REPO

pytestmark = pytest.mark.helm

HELM_MK = REPO / "k8s" / "helm.mk"
TARGETS = ("helm-install-tools", "helm-config", "helm-sync-default", "helm-lint", "helm-template", "helm-deploy", "image")
HELP_PATTERN = re.compile(r"^[a-z-]+:.*## ", re.MULTILINE)  # what the top-level `make help` greps


@pytest.fixture(scope="module")
def make():
    path = shutil.which("make")
    if path is None:
        pytest.skip("make is not installed")
    return path


def dry_run(make, target: str, *variables: str) -> str:
    result = subprocess.run(
        [make, "--no-print-directory", "-n", "-f", str(HELM_MK), target, *variables],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_target_has_a_help_line():
    listed = {line.split(":")[0] for line in HELP_PATTERN.findall(HELM_MK.read_text())}
    assert listed == set(TARGETS)


def test_template_generates_the_config_then_passes_it_with_set_file(make):
    commands = dry_run(make, "helm-template", "HELM_VCPUS=8", "HELM_WORKERS=2", "HELM_GPUS=1", "HELM_MODELS=resnet152")
    generate, render = commands.index("tsvk_tools.cli config"), commands.index("template tsvk k8s/tsvk")
    assert generate < render
    for option in ("--vcpus 8", "--workers 2", "--gpus 1", "--models resnet152", "--auth off", "--no-archive-check",
                   "--model-store /home/model-server/model-store", "--output build/helm/config.properties"):
        assert option in commands, option
    for setting in ("--set torchserve.vcpus=8", "--set torchserve.workers=2", "--set gpu.enabled=true",
                    "--set gpu.count=1", "--set-file torchserve.configProperties=build/helm/config.properties"):
        assert setting in commands, setting


def test_cpu_only_template_turns_the_gpu_off(make):
    assert "--set gpu.enabled=false" in dry_run(make, "helm-template")


def test_deploy_is_an_idempotent_upgrade_install(make):
    commands = dry_run(make, "helm-deploy", "HELM_NAMESPACE=vision")
    assert "upgrade --install tsvk k8s/tsvk --namespace vision --create-namespace" in commands


def test_image_fails_clearly_without_a_docker_engine(make):
    result = subprocess.run(
        [make, "--no-print-directory", "-f", str(HELM_MK), "image", "DOCKER=/bin/false"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "no Docker engine" in result.stderr
    assert "docker build" not in result.stdout


def test_sync_default_always_uses_the_chart_defaults(make):
    commands = dry_run(make, "helm-sync-default", "HELM_VCPUS=8", "HELM_MODELS=vit_b_16")
    assert "--vcpus 2 --workers 1 --gpus 0" in commands and "--models resnet50" in commands
    assert "k8s/sync_default_config.py build/helm/config.properties" in commands
