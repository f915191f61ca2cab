"""The image recipe installs what the project pins (setup.cfg), so what runs in the cluster is what was tested.

The image cannot be built here (no Docker engine); these checks keep its recipe honest instead.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.support.helm import CHART, REPO, dockerfile_copies, install_front
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.helm

IMAGE = REPO / "k8s" / "image"
# Pinned in setup.cfg for building archives on the user's machine; the serving image never runs it.
BUILD_TIME_ONLY = {"torch-model-archiver"}
# listed in setup.cfg without an __init__.py: the handler modules (handlers/*.py) the wheel carries as files for
# `tsvk archive` to pack
FILE_PACKAGES = {"tsvk_tools.handler_files"}
IMAGE_REQUIREMENT_FILES = ("requirements.txt", "requirements-gpu.txt", "requirements-torchserve.txt", "requirements-no-deps.txt")


def requirements(lines: str) -> dict[str, Requirement]:
    parsed = [Requirement(line.split("#")[0].strip()) for line in lines.splitlines() if line.split("#")[0].strip()]
    return {req.name.lower(): req for req in parsed}


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def project_requirements() -> dict[str, Requirement]:
    return requirements(setup_cfg()["options"]["install_requires"])


def pinned_requirements() -> dict[str, Requirement]:
    """requirements.txt's exact pins: what `make setup` installs and the tests run (setup.cfg holds ranges)."""
    return requirements((REPO / "requirements.txt").read_text())


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
    for file in IMAGE_REQUIREMENT_FILES:
        for name, req in image_requirements(file).items():
            pinned_version(req)
            if name in tested:
                assert req.specifier == tested[name].specifier, f"{file}: {req} but requirements.txt: {tested[name]}"
    image = {**image_requirements("requirements.txt"), **image_requirements("requirements-torchserve.txt")}
    for name in ("torch", "torchvision", "torchserve"):
        assert name in image and name in tested, name


def test_only_the_torchserve_engine_gets_torchserve_and_java():
    """ENGINE=kserve (the image without Java) leaves out TorchServe's package and Java 17, and nothing else."""
    assert set(image_requirements("requirements-torchserve.txt")) == {"torchserve"}
    assert "torchserve" not in image_requirements("requirements.txt")
    dockerfile = (IMAGE / "Dockerfile").read_text()
    assert _arg(dockerfile, "ENGINE") == "torchserve"
    assert re.search(r"torchserve\) java=openjdk-17-jre-headless ;;", dockerfile)
    assert re.search(r'kserve\) java="" ;;', dockerfile)
    assert re.search(r'if \[ "\$\{ENGINE\}" = torchserve \]; then echo "-r requirements-torchserve.txt"', dockerfile)


def test_image_pins_every_runtime_pin_of_setup_cfg():
    image = image_requirements("requirements.txt")
    for name, req in project_requirements().items():
        if name in BUILD_TIME_ONLY or not any(s.operator == "==" for s in req.specifier):
            continue
        assert name in image, f"setup.cfg pins {req} but k8s/image/requirements.txt does not install {name}"
        assert image[name].specifier == req.specifier, f"image has {image[name]}, setup.cfg has {req}"


def test_image_versions_satisfy_setup_cfg_where_both_name_a_package():
    project = {**project_requirements(), **project_extras()}
    for file in IMAGE_REQUIREMENT_FILES:
        for name, req in image_requirements(file).items():
            if name in project:
                version = pinned_version(req)
                assert project[name].specifier.contains(version), f"{file}: {req} is outside setup.cfg's {project[name]}"


def test_gpu_image_adds_cvcuda_and_a_torch_tensorrt_built_for_the_pinned_torch():
    gpu = image_requirements("requirements-gpu.txt")
    assert set(gpu) == {"cvcuda-cu13", "torch-tensorrt"}
    torch = pinned_version(pinned_requirements()["torch"])
    tensorrt = pinned_version(gpu["torch-tensorrt"])
    assert tensorrt.split(".")[:2] == torch.split(".")[:2], f"torch-tensorrt {tensorrt} is not built for torch {torch}"
    pinned_version(gpu["cvcuda-cu13"])


def _arg(dockerfile: str, name: str) -> str:
    return re.search(rf"^ARG {name}=(\S+)$", dockerfile, re.MULTILINE).group(1)


def test_dockerfile_builds_from_a_plain_base_with_the_distributions_java_and_python():
    """Debian's Java 17 and Python 3.11, PyPI's packages: no archived TorchServe image, no second Python."""
    dockerfile = (IMAGE / "Dockerfile").read_text()
    assert _arg(dockerfile, "BASE") == "debian:bookworm-slim"
    assert re.search(r"^FROM \$\{BASE\}$", dockerfile, re.MULTILINE)
    for gone in ("pytorch/torchserve", "deadsnakes", "download.pytorch.org", "extra-index-url"):
        assert gone not in dockerfile, gone
    install = re.search(r"apt-get install[^;]*;", dockerfile).group(0)
    assert "${java}" in install and '"${PYTHON}" "${PYTHON}-venv"' in install  # java: openjdk-17-jre-headless for TorchServe
    tested_pythons = re.findall(r"Programming Language :: Python :: (3\.\d+)", (REPO / "setup.cfg").read_text())
    assert _arg(dockerfile, "PYTHON").removeprefix("python") in tested_pythons
    assert '"${PYTHON}" -m venv /opt/venv' in dockerfile
    # Every download names PyPI; every install takes only what was downloaded.
    downloads = re.findall(r"pip download ([^;]*);", dockerfile)
    installs = re.findall(r"pip install ([^;]*);", dockerfile)
    assert len(downloads) == 2 and all("--index-url https://pypi.org/simple " in d for d in downloads)
    assert all("--no-index" in i for i in installs if "requirements" in i)
    assert "--mount=type=cache" in dockerfile, "downloads are kept between builds"


def test_gpu_image_starts_from_an_nvidia_cuda_runtime_base_with_python_3_11():
    helm_mk = (REPO / "k8s" / "helm.mk").read_text()
    gpu_base = re.search(r"^GPU_BASE \?= (\S+)$", helm_mk, re.MULTILINE).group(1)
    assert gpu_base.startswith("nvidia/cuda:") and "-runtime-" in gpu_base
    assert re.search(r"--build-arg VARIANT=gpu --build-arg BASE=\$\(GPU_BASE\) --build-arg PYTHON=python3\.11", helm_mk)


def test_image_runs_as_the_charts_high_numeric_user_and_carries_oci_labels():
    dockerfile = (IMAGE / "Dockerfile").read_text()
    uid, gid = int(_arg(dockerfile, "UID")), int(_arg(dockerfile, "GID"))
    assert uid >= 10000 and gid >= 10000
    assert re.search(r"^USER \$\{UID\}:\$\{GID\}$", dockerfile, re.MULTILINE), "the image must end as the non-root user"
    context = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (uid, gid, gid)
    for label in ("title", "description", "version", "revision", "source", "licenses", "base.name"):
        assert f"org.opencontainers.image.{label}=" in dockerfile, label
    assert _arg(dockerfile, "VERSION") == pinned_version(pinned_requirements()["torchserve"])


def test_cpu_image_leaves_out_only_what_a_gpu_process_opens():
    """triton and cuDNN's engine libraries go; libraries torch links (cudart, libcudnn.so.9) stay."""
    script = (IMAGE / "slim-cpu.sh").read_text()
    removals = [re.search(r"(rm |python -m pip uninstall).*?(;|$)", line).group(0).rstrip(";")
                for line in script.splitlines() if re.search(r"^\s*rm |pip uninstall", line)]
    assert removals == ['python -m pip uninstall --yes --quiet triton',
                        'rm -f "$site"/nvidia/cudnn/lib/libcudnn_*.so.9']
    # pip check may only complain of kserve's two pins below ours, and on the CPU image of triton.
    allowed = re.findall(r"has requirement \(([a-z|-]+)\)", script)
    assert allowed == ["|".join(sorted(KSERVE_PINS_BELOW_OURS))]
    assert "requires triton, which is not installed" in script


def test_chart_image_tags_follow_the_torchserve_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == pinned_version(pinned_requirements()["torchserve"])
    helm_mk = (REPO / "k8s" / "helm.mk").read_text()
    assert f"TORCHSERVE_VERSION := {chart['appVersion']}" in helm_mk


# The Open Inference Protocol front (protocol=oip) runs from the same image.

# kserve's pins below the project's own: the reason it is installed with --no-deps.
KSERVE_PINS_BELOW_OURS = {"psutil", "python-dateutil"}
FRONT_ENTRY = "tsvk_tools.oip.__main__"
PACKAGE_ROOTS = {"tsvk": REPO / "handlers" / "tsvk", "tsvk_tools": REPO / "tools"}


def _module_file(module: str) -> Path | None:
    top, *rest = module.split(".")
    base = PACKAGE_ROOTS[top].joinpath(*rest)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(module: str, path: Path) -> list[str]:
    """Every module name an import statement of `path` names, function-level imports included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def front_third_party_imports() -> set[str]:
    """Top-level modules outside the project and the standard library that the front's code imports."""
    seen, found, todo = set(), set(), [FRONT_ENTRY]
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        for name in _imported_names(module, path):
            top = name.split(".")[0]
            if top in PACKAGE_ROOTS:
                todo.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(top)
    return found


def _distribution_of(module: str) -> str:
    from importlib.metadata import packages_distributions

    (distribution, *_) = packages_distributions()[module]
    return canonicalize_name(distribution)


def image_pins() -> dict[str, Requirement]:
    pins: dict[str, Requirement] = {}
    for file in IMAGE_REQUIREMENT_FILES:
        pins |= {canonicalize_name(name): req for name, req in image_requirements(file).items()}
    return pins


def test_front_imports_are_all_pinned_in_the_image():
    """Each package the front's modules import (walked from `python -m tsvk_tools.oip`) is pinned there."""
    imports = front_third_party_imports()
    assert {"kserve", "fastapi", "grpc", "aiohttp", "orjson"} <= imports, imports  # the walk reaches the servers
    pins = image_pins()
    missing = {module: _distribution_of(module) for module in imports if _distribution_of(module) not in pins}
    assert not missing, f"the front imports these, but k8s/image/requirements*.txt does not pin them: {missing}"


def test_kserve_is_installed_without_dependencies_at_the_version_make_setup_installs():
    (kserve,) = image_requirements("requirements-no-deps.txt").values()
    assert kserve.name == "kserve"
    setup = re.search(r"pip install .*--no-deps (kserve==\S+)", (REPO / "Makefile").read_text()).group(1)
    assert str(kserve) == setup, f"image {kserve}, make setup {setup}"
    dockerfile = (IMAGE / "Dockerfile").read_text()
    assert re.search(r"pip install --no-index --find-links \S+ --no-deps -r /tmp/tsvk/requirements-no-deps.txt", dockerfile)
    # pip check runs after kserve comes in, allowing only its two pins below ours (slim-cpu.sh).
    assert dockerfile.rindex("requirements-no-deps.txt;") < dockerfile.rindex("slim-cpu.sh \"${VARIANT}\"")


def _closure(pins: dict[str, Requirement]) -> set[str]:
    """The distributions pip installs for these pins: each one's requirements, read from this venv's metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    seen: set[tuple[str, frozenset]] = set()
    todo = [(name, frozenset(req.extras)) for name, req in pins.items() if name != "kserve"]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            declared = requires(name) or []
        except PackageNotFoundError:
            continue  # GPU-only packages are not installed here
        for line in declared:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in extras or {""}):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {name for name, _ in seen}


def test_every_dependency_kserve_declares_comes_with_the_image_pins():
    from importlib.metadata import PackageNotFoundError, requires, version

    try:
        declared = [Requirement(line) for line in requires("kserve") or [] if "extra ==" not in line]
        assert version("kserve") == pinned_version(image_requirements("requirements-no-deps.txt")["kserve"])
    except PackageNotFoundError:
        pytest.skip("kserve is not installed here (make setup installs it)")
    pins = image_pins()
    installed = _closure(pins)
    for req in declared:
        name = canonicalize_name(req.name)
        assert name in installed, f"kserve needs {req}, which k8s/image/requirements.txt neither pins nor pulls in"
        if name in pins and name not in KSERVE_PINS_BELOW_OURS:
            assert req.specifier.contains(pinned_version(pins[name])), f"kserve needs {req}, the image pins {pins[name]}"


def test_setup_cfg_lists_every_package_so_pip_install_ships_the_front():
    """A plain (non-editable) install only takes the packages setup.cfg names: a missing one vanishes in the image."""
    listed = set(setup_cfg()["options"]["packages"].split())
    on_disk = {
        ".".join((top, *path.parent.relative_to(root).parts))
        for top, root in PACKAGE_ROOTS.items()
        for path in root.rglob("__init__.py")
        if "__pycache__" not in path.parts
    }
    listed -= FILE_PACKAGES
    assert on_disk == listed, f"on disk but not in setup.cfg: {sorted(on_disk - listed)}; listed but gone: {sorted(listed - on_disk)}"


def _dockerignore_keeps(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    def matches(pattern: str) -> bool:
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        parts = path.split("/")
        return any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1))

    kept = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        if matches(pattern.removeprefix("!")):
            kept = negated
    return kept


def test_build_context_sends_what_the_recipe_copies_and_nothing_else():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "an allow-list: the checkout holds models, venvs and results that must not reach the daemon"
    copied = [source for sources, _ in dockerfile_copies() for source in sources]
    for source in copied:
        assert (REPO / source).exists(), f"the Dockerfile copies {source}, which the repository does not have"
        files = [source] if (REPO / source).is_file() else [
            str(path.relative_to(REPO)) for path in (REPO / source).rglob("*") if path.is_file() and "__pycache__" not in path.parts]
        for file in files:
            assert _dockerignore_keeps(file, patterns), f".dockerignore leaves out {file}, which the Dockerfile copies"
    for outside in (".venv/bin/python", "model_store/resnet50.mar", ".git/HEAD", "tests/unit/test_cli.py", "build/helm/x",
                    "benchmarks/results/run.json", "tools/__pycache__/cli.cpython-311.pyc"):
        assert not _dockerignore_keeps(outside, patterns), f".dockerignore sends {outside} to the daemon"
    helm_mk = (REPO / "k8s" / "helm.mk").read_text()
    assert helm_mk.count("build -f k8s/image/Dockerfile ") == 1, "one build command for both images"
    builds = re.findall(r"^\t\$\(image_build\) --build-arg VARIANT=(\w+) .* \.$", helm_mk, re.MULTILINE)
    assert builds == ["cpu", "gpu"], "each image is built from the repository root"


def test_the_copied_sources_install_a_front_that_runs(tmp_path):
    """The recipe's own steps, run here: what it copies installs, with --no-deps, a front that imports and starts."""
    target = install_front(tmp_path / "opt", tmp_path / "work")
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = "import kserve.model_server, tsvk_tools.oip.server as s, tsvk; print(s.__file__); print(tsvk.__file__)"
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    if done.returncode != 0 and "No module named 'kserve'" in done.stderr:
        pytest.skip("kserve is not installed here (make setup installs it)")
    assert done.returncode == 0, done.stderr
    assert all(line.startswith(str(target)) for line in done.stdout.split()), done.stdout
    helped = subprocess.run([sys.executable, "-m", "tsvk_tools.oip", "--help"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, check=False)
    assert helped.returncode == 0 and "--ts-config" in helped.stdout, helped.stderr
