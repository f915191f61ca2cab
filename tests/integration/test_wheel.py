"""The wheel a user installs: built from this checkout with `python -m build`, installed into a venv in a folder
outside it, its `tsvk` archives, configures, scores and serves (tsvk's own engine, no Java) a model store there.

Installing torch again would take minutes, so the venv reaches this venv's packages through a .pth file (a path a
.pth names is not a site folder: this checkout's editable install stays out) and the wheel goes in with --no-deps.
Whether the wheel's own dependencies resolve is asked of pip separately (--dry-run --report), and the psutil the
resolver picks (kserve holds it below this venv's) is installed into the test venv, so the commands run on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from PIL import Image

import tsvk
from tests.unit.test_archive import FIXTURES, TINY_ARGS
from tsvk.common import TASK_KINDS
from tsvk_tools.config.ports import free_ports

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# what a plain install must bring (the kserve engine and its server, the clients) and must not (TorchServe: an extra)
PLAIN_INSTALL_HAS = ("torch", "torchvision", "torch-model-archiver", "kserve", "fastapi", "uvicorn", "starlette", "requests")
PLAIN_INSTALL_LACKS = ("torchserve", "hypothesis", "ray")
PHOTOS = ("red", "blue")


def _run(command: list, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run outside the checkout, with no PYTHONPATH that could reach it."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", dist, ROOT], cwd=dist, timeout=300)
    (built,) = dist.glob("tsvk-*.whl")
    return built


@pytest.fixture(scope="module")
def resolved(wheel, tmp_path_factory) -> dict[str, str]:
    """What pip would install for the wheel into an empty environment: {name: version}."""
    report = tmp_path_factory.mktemp("resolve") / "report.json"
    _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, wheel],
         cwd=report.parent, timeout=300)
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}


@pytest.fixture(scope="module")
def venv_bin(wheel, resolved, tmp_path_factory) -> Path:
    """A venv outside the checkout with the wheel and the resolver's psutil; everything else from this venv."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=venv.parent)
    python = venv / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=venv.parent).stdout.strip()
    Path(site, "tsvk-test-shared-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--ignore-installed", wheel,
          f"psutil=={resolved['psutil']}"], cwd=venv.parent, timeout=300)
    return venv / "bin"


@pytest.fixture(scope="module")
def store(venv_bin, tmp_path_factory) -> Path:
    """A folder of the user's with the tiny model's files, archived there by the installed `tsvk archive`."""
    work = tmp_path_factory.mktemp("work")
    for name in ("tiny_model.py", "tiny_labels.txt"):
        shutil.copy(FIXTURES / name, work / name)
    args = [arg.replace(str(FIXTURES), str(work)) for arg in TINY_ARGS]
    _run([venv_bin / "tsvk", "archive", *args, "--backend", "eager", "--precision", "fp32", "--quiet"], cwd=work)
    for number, colour in enumerate(PHOTOS):
        (work / "photos").mkdir(exist_ok=True)
        Image.new("RGB", (48, 40), colour).save(work / "photos" / f"{number}.jpg")
    return work


def test_the_wheel_carries_the_handlers_the_run_time_package_and_the_license(wheel):
    with zipfile.ZipFile(wheel) as bundle:
        names = set(bundle.namelist())
        metadata = bundle.read(f"tsvk-{tsvk.__version__}.dist-info/METADATA").decode()
    assert {f"tsvk_tools/handler_files/{kind.handler_file}" for kind in TASK_KINDS.values()} <= names
    assert {"tsvk/__init__.py", "tsvk/handler.py", "tsvk_tools/engines/kserve/worker.py"} <= names
    assert f"tsvk-{tsvk.__version__}.dist-info/licenses/LICENSE" in names
    assert not [name for name in names if name.startswith("tests/")]
    assert f"\nVersion: {tsvk.__version__}\n" in metadata and "Provides-Extra: torchserve" in metadata


def test_the_declared_dependencies_resolve_without_torchserve(resolved):
    assert [name for name in PLAIN_INSTALL_HAS if name not in resolved] == []
    assert [name for name in PLAIN_INSTALL_LACKS if name in resolved] == []


def test_the_installed_tsvk_is_the_wheel_s_and_says_its_version(venv_bin, resolved, tmp_path):
    assert _run([venv_bin / "tsvk", "--version"], cwd=tmp_path).stdout == f"tsvk {tsvk.__version__}\n"
    probe = "import psutil, tsvk, tsvk_tools; print(tsvk.__file__, tsvk_tools.__file__, psutil.__version__)"
    *modules, psutil_version = _run([venv_bin / "python", "-c", probe], cwd=tmp_path).stdout.split()
    assert all(Path(module).is_relative_to(venv_bin.parent) for module in modules), modules
    assert psutil_version == resolved["psutil"]
    help_text = " ".join(_run([venv_bin / "tsvk", "--help"], cwd=tmp_path).stdout.split())
    assert "archive" in help_text and "pip install 'tsvk[lab]'" in help_text


def test_archive_packs_the_handler_files_the_wheel_carries(store):
    with zipfile.ZipFile(store / "model_store" / "tiny.mar") as mar:
        names = set(mar.namelist())
        handler = mar.read("image_classifier.py")
    assert handler == (ROOT / "handlers" / "image_classifier.py").read_bytes()
    assert {"tsvk/__init__.py", "tsvk/worker/service.py", "index_to_name.json", "model-config.yaml"} <= names


def test_config_batch_and_the_kserve_engine_serve_the_archive(venv_bin, store):
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    _run([venv_bin / "tsvk", "config", "--models", "tiny", "--vcpus", "1", "--workers", "1",
          "--inference-address", f"http://127.0.0.1:{inference}", "--management-address", f"http://127.0.0.1:{management}",
          "--metrics-address", f"http://127.0.0.1:{metrics}", "--grpc-inference-port", grpc_inference,
          "--grpc-management-port", grpc_management], cwd=store)
    assert "tiny" in (store / "configs" / "generated.properties").read_text()
    _run([venv_bin / "tsvk", "batch", "--model", "tiny", "--input", "photos", "--output", "out.jsonl", "--workers", "1", "--quiet"],
         cwd=store)
    rows = [json.loads(line) for line in (store / "out.jsonl").read_text().splitlines()]
    assert [row["status"] for row in rows] == [200] * len(PHOTOS)
    _run([venv_bin / "tsvk", "serve", "--engine", "kserve", "--quiet"], cwd=store)
    try:
        served = json.loads(_run([venv_bin / "tsvk", "predict", "--model", "tiny", "--image", "photos/0.jpg"], cwd=store).stdout)
    finally:
        _run([venv_bin / "tsvk", "stop"], cwd=store)
    offline = next(row["answer"] for row in rows if row["input"].endswith("0.jpg"))
    assert set(served) == set(offline) == set((store / "tiny_labels.txt").read_text().split())
    assert served == pytest.approx(offline, abs=1e-5)
