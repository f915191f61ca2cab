"""Pack a verified build into a self-contained .mar: artifact, handler, its package, labels, settings.

The archive carries everything the worker imports, so it loads in a TorchServe whose Python has only
torch, torchvision and TorchServe. It is written beside the target and renamed into place, so a failed
build never leaves a half-written archive, and an existing one is replaced only when asked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import tsvk
from tsvk.common import SETTINGS_KEY, TASK_KINDS as TASKS, task_kind

from .. import progress
from .archive_info import MODEL_CONFIG_NAME, MODEL_VERSION, handler_differences
from .build import BuildRequest, BuildResult, build
from .mar import ModelArchive
from ..errors import UsageError
from ..fsutil import atomic_path, scratch_dir
from ..limits import model_name_problem

LABELS_FILE = "index_to_name.json"
HANDLER_FILES = "handler_files"  # the installed copy of handlers/*.py, inside tsvk_tools (setup.cfg)


def handler_sources(task: str = "classify") -> tuple[Path, Path]:
    """The task's thin handler module and the run-time package it imports: the copies an installed tsvk carries
    (setup.cfg's tsvk_tools.handler_files), else a checkout's, beside the package in handlers/."""
    package = Path(tsvk.__file__).resolve().parent
    name = task_kind(task).handler_file
    folders = (Path(__file__).resolve().parents[1] / HANDLER_FILES, package.parent)
    found = next((folder / name for folder in folders if (folder / name).is_file()), None)
    if found is None:
        raise UsageError(f"handler {name} is in none of {', '.join(map(str, folders))}: reinstall tsvk (pip install tsvk, "
                         "or pip install -e . in a checkout)")
    return found, package


def handler_files_changed(archive: Path) -> list[str]:
    """The handler files an archive bundles that differ from this checkout's, or that only one of them has: an
    archive serves its own copy of the handler, so one built before a change goes on serving the old code."""
    handlers = {kind.handler_file: name for name, kind in TASKS.items()}
    task = next((handlers[name] for name in sorted(ModelArchive(archive).names) if name in handlers), "classify")
    handler, package = handler_sources(task)
    return handler_differences(archive, package, handler)


def build_archive(request: BuildRequest, model_store: Path, force: bool = False) -> tuple[Path, BuildResult]:
    """Compile, verify and pack `model_store/<model>.mar`; nothing is written unless all of it succeeds."""
    problem = model_name_problem(request.model)
    if problem:
        raise UsageError(problem)
    target = Path(model_store) / f"{request.model}.mar"
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; pass --force to replace it")
    with scratch_dir(model_store, f".{request.model}.build-") as work:
        (work / "artifact").mkdir()
        result = build(request, work / "artifact")
        handler, package = handler_sources(result.settings.task)
        stage = _stage(work / "stage", result, handler, package, request)
        with atomic_path(target, force=force) as tmp_mar, progress.step("pack the .mar", "torch-model-archiver"):
            _run_model_archiver(request.model, result.artifact, handler, stage, work / "export")
            shutil.move(str(work / "export" / f"{request.model}.mar"), tmp_mar)
    return target, result


def _stage(stage: Path, result: BuildResult, handler: Path, package: Path, request: BuildRequest) -> Path:
    """The extra files: the run-time package, the labels, the settings, and the model code when needed."""
    extra = stage / "extra"
    shutil.copytree(package, extra / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if result.resolved.labels:
        labels = {str(i): name for i, name in enumerate(result.resolved.labels)}
        (extra / LABELS_FILE).write_text(json.dumps(labels, indent=0))
    if request.custom is not None:
        shutil.copy2(request.custom.file, extra / request.custom.file.name)
    (stage / MODEL_CONFIG_NAME).write_text(model_config_yaml(result))
    return stage


def model_config_yaml(result: BuildResult) -> str:
    """Only the `tsvk` section: TorchServe's own keys here would override the generated config."""
    header = ("# Written by `tsvk archive`. Batch size and workers are decided by `tsvk config`\n"
              "# (config.properties); tsvk.serving only holds this archive's suggestions.\n")
    return header + yaml.safe_dump({SETTINGS_KEY: result.settings.to_dict()}, sort_keys=False)


def _run_model_archiver(name: str, artifact: Path, handler: Path, stage: Path, export: Path) -> None:
    export.mkdir()
    command = [
        sys.executable, "-m", "model_archiver.model_packaging",
        "--model-name", name, "--version", MODEL_VERSION,
        "--serialized-file", str(artifact), "--handler", str(handler),
        "--extra-files", str(stage / "extra"), "--config-file", str(stage / MODEL_CONFIG_NAME),
        "--export-path", str(export), "--archive-format", "default",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"torch-model-archiver failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
