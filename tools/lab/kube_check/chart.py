"""The chart, rendered by the real helm the way a user renders it (`make helm-template`), per variant.

A variant is a set of make variables and chart values; its manifests are split into what `podman
kube play` runs (the ConfigMap and the Deployment's pod, then the `helm test` pod) and what only a
cluster uses (Services, the PVC, NetworkPolicies, ...).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ... import defaults
from ...errors import UsageError

REPO = Path(__file__).resolve().parents[3]
TEST_HOOK = "helm.sh/hook"
PODMAN_INIT_TYPE = "io.podman.annotations.init.container.type"


@dataclass(frozen=True)
class Variant:
    """One way of rendering the chart: a name, make variables, and values set on top."""

    name: str
    make_vars: dict[str, str] = field(default_factory=dict)
    values: dict = field(default_factory=dict)

    @property
    def release(self) -> str:
        """tsvk-kube-<name>, or tsvk-kube-<engine>-<name> for an engine other than TorchServe: pods and volumes of
        the two kinds of run never share a name."""
        engine = self.values.get("engine", defaults.ENGINE)
        return f"tsvk-kube-{self.name}" if engine == defaults.ENGINE else f"tsvk-kube-{engine}-{self.name}"


@dataclass(frozen=True)
class Rendered:
    variant: Variant
    documents: list[dict]

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.documents if d.get("kind") == kind]

    @property
    def deployment(self) -> dict:
        (deployment,) = self.of_kind("Deployment")
        return deployment

    @property
    def pod_spec(self) -> dict:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def test_pod(self) -> dict:
        tests = [d for d in self.of_kind("Pod") if d["metadata"].get("annotations", {}).get(TEST_HOOK) == "test"]
        if len(tests) != 1:
            raise UsageError(f"the chart rendered {len(tests)} helm test pods, expected 1")
        return tests[0]

    @property
    def server_name(self) -> str:
        """The server container's name: the chart names it after its engine (torchserve or kserve)."""
        return self.pod_spec["containers"][0]["name"]

    def container(self, name: str) -> dict:
        for container in self.pod_spec["containers"]:
            if container["name"] == name:
                return container
        raise UsageError(f"the rendered pod has no container {name!r}")

    def config_properties(self) -> dict[str, str]:
        (configmap,) = self.of_kind("ConfigMap")
        lines = configmap["data"]["config.properties"].splitlines()
        pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
        return {key.strip(): value.strip() for key, value in pairs}

    def server_manifest(self) -> str:
        """What `podman kube play` runs for the server: its ConfigMap and Deployment. podman 4.3 removes a
        finished init container while it may still count as running, and then fails the pod; keeping
        init containers (its "always" type) avoids that and changes nothing else."""
        deployment = json.loads(json.dumps(self.deployment))
        if deployment["spec"]["template"]["spec"].get("initContainers"):  # podman reads the Deployment's own
            deployment["metadata"].setdefault("annotations", {})[PODMAN_INIT_TYPE] = "always"
        return yaml.safe_dump_all(self.of_kind("ConfigMap") + [deployment], sort_keys=False)


def render(variant: Variant, build_dir: Path, helm_set: list[str]) -> Rendered:
    """`make helm-template` for the variant into build_dir/<name>/manifests.yaml, parsed."""
    out = build_dir / variant.name
    out.mkdir(parents=True, exist_ok=True)
    values_file = out / "values.yaml"
    values_file.write_text(yaml.safe_dump(variant.values or {}, sort_keys=False))
    make_vars = {"HELM_BUILD": str(out), "HELM_RELEASE": variant.release, "HELM_VALUES": f"-f {values_file}",
                 "HELM_SET": " ".join(helm_set), **variant.make_vars}
    command = ["make", "--no-print-directory", "-s", "helm-template", *(f"{k}={v}" for k, v in make_vars.items())]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise UsageError(f"rendering the chart ({variant.name}) failed: {result.stderr.strip()[-1500:]}")
    documents = [d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d]
    return Rendered(variant, documents)
