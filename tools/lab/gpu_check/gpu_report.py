"""The GPU check's report: one JSON with everything measured and everything that failed, and its Markdown."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

from tsvk.common import features

from ..bench.result_document import git_state, machine_info, software_versions
from ...cpus import detect_vcpus

SCHEMA_VERSION = 3  # 2: per-step GPU memory peaks, the GPU packages' versions; 3: "incomplete" steps
STATUSES = ("passed", "incomplete", "failed", "timed out")  # incomplete: exited 0, but some of its tests skipped
OPTIONAL_PACKAGES = ("cvcuda", "torch_tensorrt")
GPU_PACKAGES = ("cvcuda-cu13", "torch-tensorrt", "tensorrt-cu13")  # as requirements-gpu.txt pins them


def build_report(results: list[dict], started: datetime, finished: datetime, options: dict) -> dict:
    statuses = [result["status"] for result in results]
    return {
        "schema_version": SCHEMA_VERSION,
        "created": started.isoformat(timespec="seconds"),
        "duration_s": round((finished - started).total_seconds(), 1),
        "options": options,
        "environment": _environment_or_why(),
        "summary": {status: statuses.count(status) for status in STATUSES},
        "steps": results,
    }


def _environment_or_why() -> dict:
    """The environment, or why it could not be read: the steps' results are written either way."""
    try:
        return environment()
    except Exception as err:  # noqa: BLE001 - a broken probe must not lose the report
        return {"error": f"{type(err).__name__}: {err}"}


def environment() -> dict:
    """The machine, the GPU stack and what the handler's feature probes find: what a figure depends on."""
    import torch

    return {
        "machine": machine_info(detect_vcpus(), "cuda"),
        "nvidia_smi": nvidia_smi(),
        "cuda": {"torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                 "device_count": torch.cuda.device_count()},
        "software": {**software_versions(), **{name: _version(name) for name in OPTIONAL_PACKAGES}},
        "gpu_packages": gpu_package_versions(),
        "features": features.describe(),
        "unavailable": {name: features.unavailable_reason(name) for name in OPTIONAL_PACKAGES if features.unavailable_reason(name)},
        "git": git_state(),
    }


def nvidia_smi() -> list[str]:
    """One line per GPU: name, driver, memory (empty where nvidia-smi is missing)."""
    query = ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []


def gpu_package_versions() -> dict[str, str | None]:
    """The installed version of each GPU package (None: not installed), read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in GPU_PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def _version(module: str) -> str | None:
    try:
        return getattr(features.optional_module(module), "__version__", "unknown")
    except ImportError:
        return None


def write_report(report: dict, output_dir: Path) -> dict[str, Path]:
    """benchmarks/results/gpu-check-<UTC time>.json and .md."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = "gpu-check-" + datetime.fromisoformat(report["created"]).strftime("%Y%m%dT%H%M%SZ")
    paths = {"json": output_dir / f"{stem}.json", "md": output_dir / f"{stem}.md"}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(render_markdown(report))
    return paths


def render_markdown(report: dict) -> str:
    lines = [f"# GPU check, {report['created']}", "", _environment_line(report.get("environment", {})), "",
             _summary_line(report), "", "| step | status | exit | duration (s) | GPU memory peak (MiB) | key figures |",
             "|---|---|---|---|---|---|"]
    lines += [_row(step) for step in report["steps"]]
    for step in report["steps"]:
        lines += ["", *_details(step)]
    return "\n".join(lines) + "\n"


def _environment_line(env: dict) -> str:
    software, git = env.get("software", {}), env.get("git", {})
    gpus = "; ".join(env.get("nvidia_smi") or env.get("machine", {}).get("gpus") or ["no GPU listed"])
    stack = ", ".join(f"{name} {software.get(name) or 'missing'}" for name in ("torch", "torchvision", *OPTIONAL_PACKAGES))
    commit = (git.get("commit") or "unknown")[:12] + (" (uncommitted changes)" if git.get("dirty") else "")
    packages = ", ".join(f"{name} {version or 'missing'}" for name, version in env.get("gpu_packages", {}).items())
    return f"GPUs: {gpus}. CUDA {env.get('cuda', {}).get('torch_cuda')}; {stack}{'; ' + packages if packages else ''}. Commit {commit}."


def _summary_line(report: dict) -> str:
    counts = ", ".join(f"{count} {status}" for status, count in report["summary"].items() if count)
    return f"{len(report['steps'])} steps in {report['duration_s']} s: {counts or 'none run'}."


def _row(step: dict) -> str:
    headline = step["figures"].get("headline", "").replace("|", "/")
    peaks = ", ".join(f"GPU {index}: {mib}" for index, mib in sorted((step.get("gpu_memory_peak_mib") or {}).items())) or "-"
    return f"| {step['name']} | {step['status']} | {step['exit_status']} | {step['duration_s']} | {peaks} | {headline} |"


def _details(step: dict) -> list[str]:
    lines = [f"## {step['name']}: {step['status']}", "", step["purpose"], "",
             f"Command: `{step['command']}`" + (f" (the same as `{step['same_as']}`)" if step.get("same_as") else ""),
             "", "```json", json.dumps({k: v for k, v in step["figures"].items() if k != "headline"}, indent=1), "```"]
    if step["error_tail"]:
        what = "What it skipped" if step["status"] == "incomplete" else "Last lines of its output"
        lines += ["", f"{what} (all of its output in {step['log']}):", "", "```", step["error_tail"], "```"]
    return lines
