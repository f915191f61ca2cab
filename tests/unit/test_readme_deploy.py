"""The README's deploy block against the Makefile, and against the committed run of it (make deploy-check).

The block is what a user copies: every command must name a target the Makefile has, with variables that
target takes, one registry throughout, in the order the steps depend on; `make -n` must accept each as
written; and the committed deploy-check result must have run exactly this block.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tsvk_tools.lab.kube_check.readme import CLUSTER_TARGET, deploy_block, make_target, make_variables

ROOT = Path(__file__).resolve().parents[2]
HELM_MK = ROOT / "k8s" / "helm.mk"
LATEST = ROOT / "benchmarks" / "results" / "deploy-check-latest.json"
ORDER = ("image", "helm-config", "image-push", "helm-template", "helm-deploy")


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text() + HELM_MK.read_text()
    return set(re.findall(r"^([a-z][a-z-]*):.*## ", text, re.MULTILINE))


def _helm_mk_variables() -> set[str]:
    """What helm.mk reads: $(VAR) references, and the plain names its settings take (helm_setting,NAME)."""
    text = HELM_MK.read_text()
    return set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text)) | set(re.findall(r"helm_setting,([A-Z_]+)", text))


def test_the_block_runs_the_deploy_steps_in_order():
    targets = [make_target(c) for c in deploy_block()]
    assert None not in targets, f"every line of the deploy block is one make command: {deploy_block()}"
    assert tuple(targets) == ORDER


def test_every_command_names_a_target_and_variables_it_takes():
    known, variables = _targets(), _helm_mk_variables()
    for command in deploy_block():
        assert make_target(command) in known, command
        unknown = set(make_variables(command)) - variables
        assert not unknown, f"`{command}`: helm.mk reads no {sorted(unknown)}"


def test_one_registry_from_push_to_deploy():
    registries = {make_variables(c).get("REGISTRY") for c in deploy_block() if make_target(c) in ORDER[2:]}
    assert len(registries) == 1 and None not in registries, registries


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("command", deploy_block())
def test_make_accepts_each_command_as_written(command, tmp_path):
    """A dry run (nothing executed) of each command: the target and its variables parse, and the REGISTRY steps
    point helm at the pushed image's values."""
    words = command.split()[1:]
    result = subprocess.run(["make", "--no-print-directory", "-n", *words, f"HELM_BUILD={tmp_path}", "HELM=/bin/true",
                             "MODELS=resnet152", "DOCKER=true"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    registry = make_variables(command).get("REGISTRY")
    if make_target(command) in ("helm-template", "helm-deploy"):
        assert f"push_image.py values --registry {registry}" in result.stdout
        assert f"-f {tmp_path}/image-values.yaml" in result.stdout
    if make_target(command) == "image-push":
        flat = " ".join(result.stdout.replace("\\\n", " ").split())
        assert f"push_image.py push --engine true --image tsvk/torchserve:0.12.0-cpu --registry {registry}" in flat


def test_the_committed_deploy_check_ran_this_block():
    if not LATEST.exists():
        pytest.fail("no committed deploy-check result: run make deploy-check and commit benchmarks/results")
    result = json.loads(LATEST.read_text())
    assert result["readme_block"] == deploy_block(), "the README's deploy block changed since make deploy-check ran it"
    assert result["passed"] is True
    ran = [r for r in result["ran"] if r["ran"] is not False]
    assert [r["command"] for r in result["ran"]] == deploy_block()
    assert all(r["exit"] == 0 for r in ran)
    assert [r["command"] for r in result["ran"] if r["ran"] is False] == [c for c in deploy_block() if make_target(c) == CLUSTER_TARGET]
