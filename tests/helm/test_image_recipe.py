"""The image recipe installs what the project pins (setup.cfg), so what runs in the cluster is what was tested.

The image cannot be built here (no Docker engine); these checks keep its recipe honest instead.
"""

from __future__ import annotations

import configparser
import re

import pytest
import yaml
from tests.support.helm import CHART, REPO
from packaging.requirements import Requirement

pytestmark = pytest.mark.helm

IMAGE = REPO / "k8s" / "image"
# Pinned in setup.cfg for building archives on the user's machine; the serving image never runs it.
BUILD_TIME_ONLY = {"torch-model-archiver"}


def requirements(lines: str) -> dict[str, Requirement]:
    parsed = [Requirement(line.split("#")[0].strip()) for line in lines.splitlines() if line.split("#")[0].strip()]
    return {req.name.lower(): req for req in parsed}


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def project_requirements() -> dict[str, Requirement]:
    return requirements(setup_cfg()["options"]["install_requires"])


def project_extras() -> dict[str, Requirement]:
    config = setup_cfg()
    if not config.has_section("options.extras_require"):
        return {}
    return requirements("\n".join(config["options.extras_require"].values()))


def image_requirements(name: str) -> dict[str, Requirement]:
    return requirements((IMAGE / name).read_text())


def pinned_version(req: Requirement) -> str:
    (spec,) = req.specifier
    assert spec.operator == "==", f"{req} must be an exact pin"
    return spec.version


def test_image_pins_equal_the_tested_requirements_txt():
    """The image runs what `make setup` installs for the tests, version for version."""
    tested_file = REPO / "requirements.txt"
    if not tested_file.exists():
        pytest.skip("no top-level requirements.txt")
    tested = requirements(tested_file.read_text())
    for file in ("requirements.txt", "requirements-gpu.txt"):
        for name, req in image_requirements(file).items():
            pinned_version(req)
            if name in tested:
                assert req.specifier == tested[name].specifier, f"{file}: {req} but requirements.txt: {tested[name]}"
    image = image_requirements("requirements.txt")
    for name in ("torch", "torchvision", "torchserve"):
        assert name in image and name in tested, name


def test_image_pins_every_runtime_pin_of_setup_cfg():
    image = image_requirements("requirements.txt")
    for name, req in project_requirements().items():
        if name in BUILD_TIME_ONLY or not any(s.operator == "==" for s in req.specifier):
            continue
        assert name in image, f"setup.cfg pins {req} but k8s/image/requirements.txt does not install {name}"
        assert image[name].specifier == req.specifier, f"image has {image[name]}, setup.cfg has {req}"


def test_image_versions_satisfy_setup_cfg_where_both_name_a_package():
    project = {**project_requirements(), **project_extras()}
    for file in ("requirements.txt", "requirements-gpu.txt"):
        for name, req in image_requirements(file).items():
            if name in project:
                version = pinned_version(req)
                assert project[name].specifier.contains(version), f"{file}: {req} is outside setup.cfg's {project[name]}"


def test_gpu_image_adds_cvcuda_and_a_torch_tensorrt_built_for_the_pinned_torch():
    gpu = image_requirements("requirements-gpu.txt")
    assert set(gpu) == {"cvcuda-cu13", "torch-tensorrt"}
    torch = pinned_version(project_requirements()["torch"])
    tensorrt = pinned_version(gpu["torch-tensorrt"])
    assert tensorrt.split(".")[:2] == torch.split(".")[:2], f"torch-tensorrt {tensorrt} is not built for torch {torch}"
    pinned_version(gpu["cvcuda-cu13"])


def test_dockerfile_builds_on_the_pinned_torchserve_for_both_variants():
    dockerfile = (IMAGE / "Dockerfile").read_text()
    torchserve = pinned_version(project_requirements()["torchserve"])
    assert f"ARG TORCHSERVE_VERSION={torchserve}" in dockerfile
    assert "FROM pytorch/torchserve:${TORCHSERVE_VERSION}-${VARIANT}" in dockerfile
    assert re.search(r"^\s+cpu\) .*\bTORCH_INDEX_URL_CPU\b", dockerfile, re.MULTILINE)
    assert re.search(r"^\s+gpu\) .*requirements-gpu\.txt", dockerfile, re.MULTILINE)
    assert "COPY requirements.txt requirements-gpu.txt" in dockerfile
    assert re.search(r"^USER model-server$", dockerfile, re.MULTILINE), "the image must end as the non-root user"
    # The project is tested on Python 3.11 (setup.cfg classifier); the base image's 3.9 cannot run torch 2.14.
    tested_pythons = re.findall(r"Programming Language :: Python :: (3\.\d+)", (REPO / "setup.cfg").read_text())
    python = re.search(r"^ARG PYTHON_VERSION=(\S+)$", dockerfile, re.MULTILINE).group(1)
    assert python in tested_pythons, f"image Python {python}, project tested on {tested_pythons}"
    assert '"python${PYTHON_VERSION}" -m venv /home/venv' in dockerfile


def test_chart_image_tags_follow_the_torchserve_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == pinned_version(project_requirements()["torchserve"])
    helm_mk = (REPO / "k8s" / "helm.mk").read_text()
    assert f"TORCHSERVE_VERSION := {chart['appVersion']}" in helm_mk
