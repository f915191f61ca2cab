"""k8s/helm.mk: every target is listed by `make help`, and the commands it would run are the right ones."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from tests.support.helm import REPO, default_config, default_values
from tsvk_tools import defaults

pytestmark = pytest.mark.helm

HELM_MK = REPO / "k8s" / "helm.mk"
TARGETS = ("helm-install-tools", "helm-config", "helm-sync-default", "helm-lint", "helm-template", "helm-deploy", "image",
           "image-gpu", "image-push", "kube-check", "kserve-runtime-check", "deploy-check", "java-free-check", "chart-scan")
HELP_PATTERN = re.compile(r"^[a-z-]+:.*## ", re.MULTILINE)  # what the top-level `make help` greps


@pytest.fixture(scope="module")
def make():
    path = shutil.which("make")
    if path is None:
        pytest.skip("make is not installed")
    return path


def dry_run(make, target: str, *variables: str) -> str:
    """`make -n`; without HELM_BUILD, what a helm-config run in this checkout kept (build/helm/settings.mk) is ignored."""
    if not any(v.startswith("HELM_BUILD=") for v in variables):
        variables = (*variables, "helm_settings=/nonexistent")
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


def test_protocol_oip_generates_an_oip_config_and_sets_the_chart_switch(make):
    commands = dry_run(make, "helm-template", "HELM_PROTOCOL=oip")
    assert "--protocol oip --oip-address 0.0.0.0" in commands, "the front must be reachable from the Service"
    assert "--set protocol=oip" in commands
    plain = dry_run(make, "helm-template")
    assert "--protocol" not in plain and "protocol=" not in plain, "empty: tsvk config and the chart decide"


@pytest.mark.parametrize("target", ["helm-template", "helm-deploy"])
def test_engine_sets_the_charts_engine_value(make, target):
    assert "--set engine=kserve" in dry_run(make, target, "ENGINE=kserve")
    assert "engine=" not in dry_run(make, target), "empty: the chart's default (torchserve)"


def test_kube_check_passes_the_engine_on(make):
    commands = dry_run(make, "kube-check", "ENGINE=kserve", "HELM=helm")
    assert "-m tsvk_tools.lab.kube_check " in commands and "--engine kserve" in commands
    assert "--engine" not in dry_run(make, "kube-check", "HELM=helm")


@pytest.mark.parametrize("target, variant, base", [("image", "cpu", "debian:bookworm-slim"),
                                                   ("image-gpu", "gpu", "nvidia/cuda:13.0.1-runtime-ubuntu22.04")])
def test_image_is_built_from_the_repository_root_on_its_base(make, target, variant, base):
    commands = dry_run(make, target, "IMAGE_REPOSITORY=registry.example.com/tsvk", "DOCKER=podman")
    assert re.search(rf"podman build -f k8s/image/Dockerfile .*--build-arg VARIANT={variant} --build-arg BASE={re.escape(base)} "
                     rf".*-t registry.example.com/tsvk:0.12.0-{variant} \.$", commands, re.MULTILINE), commands


def test_image_base_and_build_ca_are_options(make):
    commands = dry_run(make, "image", "DOCKER=podman", "BASE=localhost/tsvk-kube-base:bookworm", "BUILD_CA=/etc/ssl/ca.pem")
    assert "--build-arg BASE=localhost/tsvk-kube-base:bookworm" in commands
    # pip inside the build trusts the proxy's CA through a mounted file, never one baked into a layer.
    assert "--volume /etc/ssl/ca.pem:/etc/tsvk-build-ca.pem:ro --build-arg PIP_CERT=/etc/tsvk-build-ca.pem" in commands
    assert "--volume" not in dry_run(make, "image", "DOCKER=podman")


def test_cpu_only_template_turns_the_gpu_off(make):
    assert "--set gpu.enabled=false" in dry_run(make, "helm-template")


def test_deploy_is_an_idempotent_upgrade_install(make):
    commands = dry_run(make, "helm-deploy", "HELM_NAMESPACE=vision")
    assert "upgrade --install tsvk k8s/tsvk --namespace vision --create-namespace" in commands


def test_image_fails_clearly_without_a_container_engine(make):
    result = subprocess.run(
        [make, "--no-print-directory", "-f", str(HELM_MK), "image", "DOCKER=/bin/false"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "no container engine answers" in result.stderr and "docker or podman" in result.stderr
    assert "docker build" not in result.stdout


def test_sync_default_always_uses_the_chart_defaults(make):
    commands = dry_run(make, "helm-sync-default", "HELM_VCPUS=8", "HELM_MODELS=vit_b_16", "HELM_MAX_BATCH_DELAY=7",
                       "HELM_PROTOCOL=oip")
    assert "--vcpus 2 --workers 1 --gpus 0" in commands and "--models resnet50" in commands
    assert "--max-batch-delay" not in commands and "--metrics-address" not in commands  # tsvk config decides
    assert "--protocol" not in commands
    assert "k8s/sync_default_config.py build/helm/config.properties" in commands


def make_variables(make, *names: str) -> dict[str, str]:
    """The values helm.mk gives these variables when nothing is set on the command line."""
    result = subprocess.run(
        [make, "--no-print-directory", "-s", "-f", str(HELM_MK), "--eval", "print-%: ; @echo '$*=$($*)'",
         *(f"print-{name}" if "=" not in name else name for name in names)],
        cwd=REPO, capture_output=True, text=True, check=True,
    )
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


def test_chart_defaults_are_the_values_yaml_defaults_and_tsvks(make):
    """helm.mk writes the chart's defaults once; values.yaml says the same, and so does tsvk for batch and workers."""
    chart = make_variables(make, "chart_vcpus", "chart_workers", "chart_batch", "chart_gpus", "chart_models")
    values = default_values()
    assert int(chart["chart_vcpus"]) == values["torchserve"]["vcpus"]
    assert int(chart["chart_workers"]) == values["torchserve"]["workers"] == defaults.WORKERS
    assert int(chart["chart_batch"]) == values["torchserve"]["batchSize"] == defaults.BATCH
    assert (chart["chart_gpus"] != "0") == values["gpu"]["enabled"]
    assert f"load_models={chart['chart_models'].replace(',', '.mar,')}.mar" in default_config()
    helm = make_variables(make, "HELM_VCPUS", "HELM_WORKERS", "HELM_BATCH", "HELM_GPUS",
                          "HELM_MAX_BATCH_DELAY", "HELM_METRICS_ADDRESS", "HELM_PROTOCOL", "HELM_BUILD=/nonexistent")
    assert helm == {**{f"HELM_{key[6:].upper()}": value for key, value in chart.items() if key != "chart_models"},
                    "HELM_MAX_BATCH_DELAY": "", "HELM_METRICS_ADDRESS": "", "HELM_PROTOCOL": ""}


def _store(tmp_path, *names: str):
    store = tmp_path / "store"
    store.mkdir()
    for name in names:
        (store / f"{name}.mar").write_bytes(b"an archive")
    return store


def test_with_no_models_named_the_chart_serves_the_local_store_and_says_so(make, tmp_path):
    store = _store(tmp_path, "resnet152", "efficientnet_lite0")
    commands = dry_run(make, "helm-template", f"HELM_MODEL_STORE={store}", f"HELM_BUILD={tmp_path / 'build'}")
    assert "--models efficientnet_lite0,resnet152" in commands
    assert f"MODELS=efficientnet_lite0,resnet152 (the archives in {store}/)" in commands


def test_with_no_models_and_an_empty_store_helm_config_says_what_to_do(make, tmp_path):
    result = subprocess.run([make, "--no-print-directory", "-f", str(HELM_MK), "helm-config", f"HELM_MODEL_STORE={_store(tmp_path)}",
                             f"HELM_BUILD={tmp_path / 'build'}"], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "no MODELS given and no archive in" in result.stderr and "make archive MODEL=" in result.stderr
    assert not (tmp_path / "build" / "config.properties").exists()


@pytest.mark.parametrize("plain, spelled", [("VCPUS=8", "HELM_VCPUS=8"), ("WORKERS=2", "HELM_WORKERS=2"),
                                            ("MODELS=resnet152", "HELM_MODELS=resnet152"), ("PROTOCOL=oip", "HELM_PROTOCOL=oip")])
def test_the_plain_names_are_the_helm_names(make, plain, spelled, tmp_path):
    build = f"HELM_BUILD={tmp_path}"
    as_plain, as_helm = dry_run(make, "helm-template", plain, build), dry_run(make, "helm-template", spelled, build)
    assert as_plain.replace("(given)", "") == as_helm.replace("(given)", "")


def test_helm_template_ships_what_helm_config_was_given(make, tmp_path):
    """helm-config VCPUS=4, then helm-template with nothing: the 4 vCPUs carry through, and it says where they came from."""
    pytest.importorskip("tsvk_tools.config.serving_config")
    build = tmp_path / "build"
    result = subprocess.run([make, "--no-print-directory", "-f", str(HELM_MK), "helm-config", f"PYTHON={sys.executable}",
                             f"HELM_BUILD={build}", "VCPUS=4", "WORKERS=2", "MODELS=resnet152"],
                            cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "VCPUS=4 (given)" in result.stdout
    commands = dry_run(make, "helm-template", f"HELM_BUILD={build}")
    assert "--vcpus 4 --workers 2" in commands and "--models resnet152" in commands
    assert "--set torchserve.vcpus=4" in commands and "--set torchserve.workers=2" in commands
    assert "VCPUS=4 (from the last helm-config)" in commands and "BATCH=8 (from the last helm-config)" in commands
    overridden = dry_run(make, "helm-template", f"HELM_BUILD={build}", "VCPUS=6")
    assert "--vcpus 6" in overridden and "VCPUS=6 (given)" in overridden


def test_registry_points_the_chart_at_the_pushed_image(make, tmp_path):
    commands = dry_run(make, "helm-deploy", "REGISTRY=registry.example.com/ml", "MODELS=resnet152", f"HELM_BUILD={tmp_path}")
    assert (f"k8s/push_image.py values --registry registry.example.com/ml --models resnet152 --model-store model_store "
            f"--record {tmp_path}/pushed.json --output {tmp_path}/image-values.yaml") in " ".join(commands.replace("\\\n", " ").split())
    assert f"-f {tmp_path}/image-values.yaml" in commands
    assert "image-values" not in dry_run(make, "helm-deploy", "MODELS=resnet152", f"HELM_BUILD={tmp_path}")


def test_image_push_needs_a_registry(make, tmp_path):
    result = subprocess.run([make, "--no-print-directory", "-f", str(HELM_MK), "image-push", "DOCKER=true", "MODELS=resnet152",
                             f"HELM_BUILD={tmp_path}"], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "REGISTRY=host[:port]/path" in result.stderr


def test_every_kubernetes_target_sets_up_first():
    """From a fresh clone: the top-level Makefile hands its setup to helm.mk, and helm is fetched when missing."""
    makefile = (REPO / "Makefile").read_text()
    assert "kube_setup := setup\ninclude k8s/helm.mk" in makefile
    text = HELM_MK.read_text()
    for target in TARGETS:
        if target in ("image", "image-gpu", "helm-sync-default", "java-free-check"):
            continue  # image needs only a container engine; helm-sync-default runs helm-config first; java-free-check
            # runs on the system's python3 and sets up the venv inside its container, as a bare machine would
        prerequisites = re.search(rf"^{target}:(?![^#\n]*=)([^#\n]*)", text, re.MULTILINE).group(1)
        assert "$(kube_setup)" in prerequisites or "helm-config" in prerequisites, target
        if target in ("helm-lint", "helm-template", "helm-deploy", "kube-check", "deploy-check", "chart-scan"):
            assert "$(helm_fetch)" in prerequisites, target
    assert "helm_fetch := $(if $(findstring /,$(HELM)),$(HELM))" in text
    assert re.search(r"^\$\(helm_fetch\): \| \$\(kube_setup\)\n\t\$\(PYTHON\) k8s/fetch_helm.py \$\(HELM\)", text, re.MULTILINE)
