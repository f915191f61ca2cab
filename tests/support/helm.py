"""Shared helpers of the chart tests: where things are, rendered manifests, config variants."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "k8s" / "tsvk"
DOCKERFILE = REPO / "k8s" / "image" / "Dockerfile"
FRONT_SOURCES = "/tmp/tsvk/src"  # where the recipe copies the project before installing the front
RELEASE = "demo"
NAMESPACE = "ml"
INSTALL_HINT = "run `make helm-install-tools`"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing_tool(what: str) -> None:
    """Skip locally, fail in CI: a tool CI needs must never be skipped silently."""
    message = f"{what} not found; {INSTALL_HINT}"
    if _in_ci():
        pytest.fail(f"{message} (CI=true: the helm tests must run)")
    pytest.skip(message)


def find_helm() -> Path | None:
    for candidate in (os.environ.get("HELM"), str(REPO / ".bin" / "helm"), shutil.which("helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


@dataclass
class Rendered:
    """The manifests of one `helm template` run."""

    documents: list[dict]
    text: str = field(repr=False)

    def kinds(self) -> list[str]:
        return [doc["kind"] for doc in self.documents]

    def all(self, kind: str) -> list[dict]:
        return [doc for doc in self.documents if doc["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict:
        found = [doc for doc in self.all(kind) if doc["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"expected one {kind} named *{name_suffix}, found {[d['metadata']['name'] for d in found]}"
        return found[0]

    def has(self, kind: str) -> bool:
        return any(doc["kind"] == kind for doc in self.documents)

    def pod_spec(self) -> dict:
        return self.one("Deployment")["spec"]["template"]["spec"]

    def server(self) -> dict:
        return self.pod_spec()["containers"][0]

    def container(self, name: str) -> dict:
        found = [c for c in self.pod_spec()["containers"] if c["name"] == name]
        assert len(found) == 1, f"expected one container {name}, found {[c['name'] for c in self.pod_spec()['containers']]}"
        return found[0]


def helm_args(values: dict | None = None, files: dict[str, Path] | None = None) -> list[str]:
    args: list[str] = []
    for key, path in (files or {}).items():
        args += ["--set-file", f"{key}={path}"]
    if values:
        args += ["--values", "-"]
    return args


def run_helm(helm: Path, args: list[str], values: dict | None = None) -> subprocess.CompletedProcess:
    stdin = yaml.safe_dump(values) if values else None
    return subprocess.run([str(helm), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False)


def parse_manifests(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def default_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def default_config() -> str:
    return default_values()["torchserve"]["configProperties"]


def config_with(**changes: str) -> str:
    """The default config with some properties replaced (or appended when absent)."""
    lines = default_config().splitlines()
    for key, value in changes.items():
        key = key.replace("__", ".")
        hits = [i for i, line in enumerate(lines) if line.split("=", 1)[0].strip() == key]
        if hits:
            lines[hits[0]] = f"{key}={value}"
        else:
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def config_without(*keys: str) -> str:
    return "".join(
        line + "\n" for line in default_config().splitlines() if line.split("=", 1)[0].strip() not in keys
    )


def dockerfile_copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY of the image recipe."""
    copies = []
    for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():  # continued lines joined
        if line.startswith("COPY "):
            *sources, destination = line.split()[1:]
            copies.append((sources, destination))
    return copies


def install_front(target: Path, work: Path) -> Path:
    """What the image recipe does for the front, here: copy what it copies into its source folder, then
    `pip install --no-deps --target` (with this venv's setuptools instead of a downloaded one)."""
    source = work / "src"
    source.mkdir(parents=True)
    for sources, destination in dockerfile_copies():
        if not destination.startswith(FRONT_SOURCES):
            continue
        for name in sources:
            into = source / destination.removeprefix(FRONT_SOURCES).strip("/")
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, into, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                into.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, into / name)
    pip_line = next(line for line in DOCKERFILE.read_text().splitlines() if re.search(r"--target \S+ " + re.escape(FRONT_SOURCES), line))
    assert "--no-deps" in pip_line, pip_line
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                             "--target", str(target), str(source)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return target


def front_target() -> str:
    """The folder the recipe installs the front into (pip install --target)."""
    return re.search(r"--target (\S+) " + re.escape(FRONT_SOURCES), DOCKERFILE.read_text()).group(1)
