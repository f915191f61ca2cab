"""The steps of a GPU check, in order: what each runs, how long it may take, and what it measured.

First the CUDA 13 builds of CV-CUDA and Torch-TensorRT are installed (requirements-gpu.txt), then each
file of tests/gpu runs in a pytest process of its own, so a crash in a CUDA library loses that file's
results only. Each step's `figures` reads what the step left behind (its output, its JUnit XML, the
archive it built, the benchmark result it wrote) and returns the key figures plus a one-line `headline`.
The steps' limits add up to less than an hour, the stops after a limit included (`WORST_CASE_S`).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...archive.archive_info import read_archive_settings
from .gpu_report import gpu_package_versions
from .weights import SEEDED, weights_argument

DEFAULT_MODEL = "resnet50"
DEFAULT_WEIGHTS = SEEDED
# TensorRT fp16 is what the GPU bench serves; AOTInductor fp32 on CUDA is where verification's TF32 bounds apply.
ARCHIVES = (("tensorrt", "fp16", 10), ("aoti", "fp32", 7))  # backend, precision, minutes allowed
MINUTE = 60
ROOT = Path(__file__).resolve().parents[3]
GPU_REQUIREMENTS = ROOT / "requirements-gpu.txt"
GPU_TESTS = ROOT / "tests" / "gpu"
# minutes allowed per test file; a file not listed gets DEFAULT_TEST_MINUTES
TEST_MINUTES = {"test_backends_gpu.py": 14, "test_handler_gpu.py": 5}
DEFAULT_TEST_MINUTES = 5
# what another step runs already: test_bench_gpu.py is `make bench GPU=1 QUICK=1` on a smaller model
COVERED_BY_STEPS = {"test_bench_gpu.py": "bench-gpu-quick"}
WORST_CASE_S = 60 * MINUTE  # every step at its limit, plus each one's stop (run.STOP_GRACE_S), fits in this


@dataclass(frozen=True)
class Step:
    name: str
    purpose: str
    argv: tuple[str, ...]
    timeout_s: int
    figures: Callable[[str, Path], dict]  # (the step's output, the check's work dir) -> key figures
    same_as: str = ""  # the command a person would type for the same thing


def plan(work_dir: Path, model: str = DEFAULT_MODEL, weights: str = DEFAULT_WEIGHTS, python: str = sys.executable) -> list[Step]:
    """Every step of the check, in the order they run."""
    packages = Step("gpu-packages", "install the CUDA 13 builds of CV-CUDA and Torch-TensorRT (requirements-gpu.txt)",
                    (python, "-m", "pip", "install", "-q", "-r", str(GPU_REQUIREMENTS)), 6 * MINUTE, package_figures,
                    f"pip install -r {GPU_REQUIREMENTS.name}")
    preprocess = Step("preprocess-bench", "preprocessing images/s of every backend here vs TorchServe's PIL path",
                      (python, "-m", "tsvk_tools.lab.bench.preprocess", "--rounds", "5"), 5 * MINUTE, preprocess_figures,
                      "make bench-preprocess")
    bench = Step("bench-gpu-quick", "every serving system side by side on the GPU (quick preset)",
                 (python, "-m", "tsvk_tools.lab.bench.bench_cli", "--gpu", "--quick"), 9 * MINUTE, bench_figures,
                 "make bench GPU=1 QUICK=1")
    tests = [gpu_test_step(work_dir, path, python) for path in gpu_test_files()]
    archives = [archive_step(work_dir, model, weights, *archive, python) for archive in ARCHIVES]
    return [packages, *tests, preprocess, *archives, bench]


def gpu_test_files(folder: Path = GPU_TESTS) -> list[Path]:
    """Every test file of tests/gpu but those another step runs already."""
    return [path for path in sorted(folder.glob("test_*.py")) if path.name not in COVERED_BY_STEPS]


def gpu_test_step(work_dir: Path, path: Path, python: str) -> Step:
    """One test file in a pytest process of its own, its JUnit XML keeping what the tests measured."""
    name = "gpu-" + path.stem.removeprefix("test_").removesuffix("_gpu").replace("_", "-")
    xml = work_dir / f"{name}.xml"
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return Step(name, f"{relative} on CUDA", (python, "-m", "pytest", str(path), "-q", "-rfEs", f"--junitxml={xml}",
                                              "-o", "junit_family=legacy"),  # legacy: keeps record_property
                TEST_MINUTES.get(path.name, DEFAULT_TEST_MINUTES) * MINUTE, functools.partial(pytest_figures, xml),
                f"pytest {relative}")


def archive_step(work_dir: Path, model: str, weights: str, backend: str, precision: str, minutes: int, python: str) -> Step:
    store = work_dir / f"model_store-{backend}-{precision}"
    argv = (python, "-m", "tsvk_tools.cli", "archive", "--model", model, "--backend", backend, "--device", "cuda",
            "--precision", precision, "--weights", weights_argument(weights, model, work_dir), "--model-store", str(store),
            "--force")
    return Step(f"archive-{backend}-{precision}", f"build and verify a {backend} {precision} archive of {model} on CUDA",
                argv, minutes * MINUTE, functools.partial(archive_figures, store / f"{model}.mar"),
                f"make archive MODEL={model} BACKEND={backend} DEVICE=cuda PRECISION={precision} WEIGHTS={weights}")


def package_figures(output: str, work_dir: Path) -> dict:
    """The versions of the GPU packages now installed (None: missing)."""
    versions = gpu_package_versions()
    return {"headline": ", ".join(f"{name} {version or 'missing'}" for name, version in versions.items()), "versions": versions}


def pytest_figures(xml: Path, output: str, work_dir: Path) -> dict:
    """Counts, each failure with its message, each skip with its reason, and what the tests measured."""
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed, skipped, measured = [], [], {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        failed += [f"{name}: {_first_line(node.get('message'))}" for node in case if node.tag in ("failure", "error")]
        skipped += [f"{name}: {_first_line(node.get('message'))}" for node in case if node.tag == "skipped"]
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        if properties:
            measured[name] = properties
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    headline = f"{passed} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped"
    return {"headline": headline, "passed": passed, **counts, "failed_tests": failed, "skipped_tests": skipped,
            "measured": measured}


_PREPROCESS_ROW = re.compile(r"^(?P<path>\S.*?)\s+(?P<ips>\d+\.\d+)\s+(?P<ms>\d+\.\d+)\s+(?P<ratio>\d+\.\d+)x$")


def preprocess_figures(output: str, work_dir: Path) -> dict:
    """The benchmark's table: images/s, ms per batch and the ratio to the PIL path, per path."""
    paths = {}
    for line in output.splitlines():
        row = _PREPROCESS_ROW.match(line.strip())
        if row:
            paths[row["path"]] = {"images_per_s": float(row["ips"]), "ms_per_batch": float(row["ms"]),
                                  "vs_pil": float(row["ratio"])}
    headline = ", ".join(f"{name} {p['images_per_s']:.0f} img/s ({p['vs_pil']:.2f}x)" for name, p in paths.items())
    setup = next((line for line in output.splitlines() if line.startswith("preprocess throughput")), "")
    return {"headline": headline, "setup": setup, "paths": paths}


def archive_figures(mar: Path, output: str, work_dir: Path) -> dict:
    """The verification the archive carries, its size and how long it took to build."""
    settings = read_archive_settings(mar)
    verification = dict(settings.provenance.get("verification") or {})
    headline = (f"verification {'PASS' if verification.get('passed') else 'FAIL'}: max |diff| "
                f"{verification.get('max_abs_diff', float('nan')):.3g} (allowed {verification.get('allowed_abs_diff', float('nan')):.3g}), "
                f"top-1 {verification.get('top1_agreement', 0):.0%}")
    return {"headline": headline, "verification": verification, "build_seconds": settings.provenance.get("build_seconds"),
            "archive_mib": round(mar.stat().st_size / 2**20, 1), "weights": settings.provenance.get("weights")}


_WROTE = re.compile(r"^wrote (?P<json>\S+\.json)\b", re.MULTILINE)


def bench_figures(output: str, work_dir: Path) -> dict:
    """Throughput and latency of each system, and the ratios, from the result this run wrote."""
    wrote = _WROTE.search(output)
    if wrote is None:
        return {"headline": "no benchmark result written"}
    result = json.loads(Path(wrote["json"].rstrip(",")).read_text())
    systems = {name: {"throughput_ips": s.get("throughput_ips"), "p50_ms": (s.get("latency_ms") or {}).get("p50"),
                      "p99_ms": (s.get("latency_ms") or {}).get("p99"), **({"error": _first_line(s["error"])} if "error" in s else {})}
               for name, s in result.get("systems", {}).items()}
    ratios = result.get("ratios", {})
    ours = systems.get("ours", {}).get("throughput_ips")
    headline = (f"ours {ours} img/s, {ratios.get('ours_vs_torchserve_default')}x stock defaults, "
                f"{ratios.get('ours_vs_torchserve_tuned')}x hand-tuned")
    return {
        "headline": headline,
        "result": wrote["json"].rstrip(","),
        "systems": systems,
        "ratios": ratios,
        "backend": result.get("options", {}).get("backend"),
        "gpus": result.get("machine", {}).get("gpus"),
    }


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:300] if lines else ""
