"""Rules for the .mar archives a config serves, tsvk's or anyone's.

A worker loads an archive by importing its handler (a file packed in it, or a module TorchServe or
the worker's Python provides) with whatever Python packages are installed; TorchServe installs an
archive's requirements file only with install_py_dep_per_model=true. An archive's model-config.yaml
overrides the config's batch and worker settings. tsvk archives also carry their compiled max batch
and the seconds their artifact took to load at build time.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tsvk.common import HandlerSettings, SETTINGS_KEY, SettingsError
from tsvk.model import BF16_REMEDY, REMEDY, cpu_flags, emulated_bf16, mismatch_here, recorded_target

from ..archive.archive_info import MODEL_CONFIG_NAME
from ..archive.mar import MANIFEST, ArchiveError, ModelArchive
from ..config.serving_config import batch_problem
from . import torchserve as ts
from .config_rules import Context, ServedModel, is_true
from .findings import ERROR, WARNING, Finding

LOAD_TIME_MARGIN = 2.0  # a worker loads with fewer threads than the build had, beside other workers


@dataclass
class Archive:
    path: Path
    names: set[str] = field(default_factory=set)
    manifest: dict = field(default_factory=dict)
    model_config: dict = field(default_factory=dict)
    settings: HandlerSettings | None = None
    sources: dict[str, str] = field(default_factory=dict)  # packed .py files
    problem: str | None = None


def read_archive(path: Path) -> Archive:
    archive = Archive(Path(path))
    try:
        mar = ModelArchive(path)
        archive.names, archive.manifest = mar.names, mar.manifest
        archive.sources = {name: data.decode(errors="replace") for name, data in mar.python_files().items()}
        if MODEL_CONFIG_NAME in archive.names:
            archive.model_config = yaml.safe_load(mar.read(MODEL_CONFIG_NAME)) or {}
    except (ArchiveError, yaml.YAMLError) as err:
        archive.problem = f"cannot be read as a .mar ({err})"
        return archive
    if isinstance(archive.model_config, dict) and SETTINGS_KEY in archive.model_config:
        try:
            archive.settings = HandlerSettings.from_model_yaml(archive.model_config)
        except SettingsError as err:
            archive.problem = f"its tsvk settings are invalid ({err})"
    return archive


def check_archive(archive: Archive, install_deps: bool) -> list[Finding]:
    where = archive.path.name
    if archive.problem:
        return [Finding(ERROR, where, archive.problem, "TorchServe cannot load it", "rebuild it (`tsvk archive`, or torch-model-archiver)")]
    if not archive.manifest:
        return [Finding(ERROR, where, f"no {MANIFEST}", "TorchServe does not know what to load", "rebuild it with torch-model-archiver")]
    model = archive.manifest.get("model", {})
    findings = []
    serialized = model.get("serializedFile")
    if serialized and serialized not in archive.names:
        findings.append(Finding(ERROR, where, f"its serializedFile {serialized} is not in the archive", "the worker's load fails",
                                "rebuild it with --serialized-file pointing at the weights"))
    findings += _handler(archive, model.get("handler", ""))
    findings += _requirements(archive, model.get("requirementsFile"), install_deps)
    if archive.settings is not None and archive.settings.artifact.format == "openvino" and not _importable("openvino"):
        findings.append(Finding(ERROR, where, "an OpenVINO archive, and this Python has no openvino", "its workers fail to load",
                                "pip install openvino (requirements.txt pins the version)"))
    return findings + _cpu_instructions(archive) + _cpu_precision(archive)


def _cpu_precision(archive: Archive, flags: frozenset[str] | None = None) -> list[Finding]:
    """A bf16 archive on a CPU that would emulate bf16 (tsvk/model/cpu_precision.py): it serves, slower than fp32."""
    artifact = archive.settings.artifact if archive.settings is not None else None
    problem = artifact and emulated_bf16(artifact.precision, artifact.device, cpu_flags() if flags is None else flags)
    if not problem:
        return []
    return [Finding(WARNING, archive.path.name, f"it holds {problem}", "its workers serve slower than an fp32 archive would",
                    BF16_REMEDY)]


def _cpu_instructions(archive: Archive) -> list[Finding]:
    """An AOTInductor CPU package compiled for vector instructions this machine's CPU lacks (tsvk/model/cpu_isa.py)."""
    artifact = archive.settings.artifact if archive.settings is not None else None
    if artifact is None or artifact.format != "aoti" or artifact.device != "cpu" or artifact.file not in archive.names:
        return []
    try:
        with zipfile.ZipFile(archive.path) as mar, zipfile.ZipFile(mar.open(artifact.file)) as package:
            target = recorded_target(package)
    except (OSError, zipfile.BadZipFile, ValueError) as err:
        return [Finding(ERROR, archive.path.name, f"its AOTInductor package {artifact.file} cannot be read ({err})",
                        "its workers fail to load", "rebuild it (`tsvk archive`)")]
    problem = mismatch_here(target)
    if problem is None:
        return []
    return [Finding(ERROR, archive.path.name, f"its AOTInductor package cannot run on this CPU: {problem}",
                    "every worker refuses it at load", REMEDY)]


def _handler(archive: Archive, handler: str) -> list[Finding]:
    where, module = archive.path.name, handler.split(":")[0]
    if not module:
        return [Finding(ERROR, where, "its manifest names no handler", "TorchServe cannot serve it", "rebuild it with --handler")]
    packed = module if module.endswith(".py") else f"{module}.py"
    if packed in archive.names:
        return _imports(archive, packed)
    if module in ts.BUILTIN_HANDLERS or (not module.endswith(".py") and _importable(module)):
        return []
    return [Finding(ERROR, where, f"its handler {handler!r} is neither packed in it nor a module this Python has",
                    "every worker fails its load", f"rebuild it with --handler path/to/{packed}, or install the module")]


def _imports(archive: Archive, handler_file: str) -> list[Finding]:
    """Modules the packed handler imports at its top that neither the archive nor this Python provides."""
    packed = {Path(name).parts[0].removesuffix(".py") for name in archive.names}
    try:
        tree = ast.parse(archive.sources.get(handler_file, ""))
    except SyntaxError as err:
        return [Finding(ERROR, archive.path.name, f"its handler {handler_file} does not parse ({err.msg}, line {err.lineno})",
                        "every worker fails its load", "fix the handler and rebuild")]
    wanted = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            wanted |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.add(node.module.split(".")[0])
    missing = sorted(m for m in wanted - packed if m not in sys.stdlib_module_names and not _importable(m))
    if not missing:
        return []
    return [Finding(ERROR, archive.path.name, f"its handler imports {', '.join(missing)}, which this Python lacks",
                    "every worker fails its load with ModuleNotFoundError", f"pip install {' '.join(missing)} where TorchServe runs")]


def _requirements(archive: Archive, requirements: str | None, install_deps: bool) -> list[Finding]:
    if not requirements:
        return []
    where = archive.path.name
    try:
        with zipfile.ZipFile(archive.path) as mar:
            text = mar.read(requirements).decode(errors="replace")
    except (KeyError, OSError, zipfile.BadZipFile):
        return [Finding(ERROR, where, f"its requirementsFile {requirements} is not in the archive", "the worker's load fails",
                            "rebuild it with --requirements-file")]
    names = [re.split(r"[<>=!~;\[ @]", line.strip(), maxsplit=1)[0] for line in text.splitlines()
             if line.strip() and not line.strip().startswith(("#", "-"))]
    missing = [n for n in names if not _installed(n)]
    if install_deps:
        return [Finding(WARNING, where, f"TorchServe will pip install {', '.join(names)} for it at every start",
                        "each start needs the network and takes longer, and what gets installed can change between starts",
                        "install them into the image and set install_py_dep_per_model=false")] if names else []
    if missing:
        return [Finding(ERROR, where, f"it requires {', '.join(missing)}, not installed here, and install_py_dep_per_model is off",
                        "TorchServe ignores the archive's requirements file, so the worker's imports fail",
                        f"pip install {' '.join(missing)} where TorchServe runs")]
    return []


def check_served(ctx: Context, model: ServedModel, archive: Archive) -> list[Finding]:
    """The config's settings for one model against what its archive can do."""
    props, findings = ctx.props, []
    forced = {k: model.overrides[k] for k in ts.ARCHIVE_OVERRIDES if k in model.overrides}
    if forced:
        findings.append(Finding(WARNING, archive.path.name, f"its model-config.yaml sets {_pairs(forced)}, overriding config.properties",
                                "TorchServe 0.12 lets the archive's values win, so the config's numbers for this model are not used",
                                "remove them from the archive's model-config.yaml (tsvk archives keep suggestions under tsvk.serving)"))
    batch = int(forced.get("batchSize", model.entry.get("batchSize", 1)) or 1)
    if model.settings is not None:
        problem = batch_problem(model.name, batch, model.settings)
        if problem:
            findings.append(Finding(ERROR, props.where("models"), problem.replace("--batch ", "batchSize "),
                                    "a batch larger than the artifact accepts fails every full batch",
                                    f"batchSize <= {model.settings.artifact.max_batch} (`{ctx.fix_command}` takes it from the archive)"))
    queue = int(props.get("job_queue_size", ts.DEFAULT_JOB_QUEUE_SIZE) or 0) if str(props.get("job_queue_size", "0")).isdigit() else None
    if queue is not None and batch > queue:
        findings.append(Finding(WARNING, props.where("job_queue_size"), f"{model.name}: batchSize {batch} is above job_queue_size {queue}",
                                "a batch can never fill: TorchServe refuses requests before it has enough",
                                f"job_queue_size >= {2 * batch}"))
    findings += _load_time(ctx, model, forced)
    return findings


def _load_time(ctx: Context, model: ServedModel, forced: dict) -> list[Finding]:
    if model.settings is None:
        return []
    load_s = (model.settings.provenance.get("compile") or {}).get("load_seconds")
    if not load_s:
        return []
    default = ctx.props.get("default_startup_timeout", str(ts.DEFAULT_STARTUP_TIMEOUT_S))
    timeout = forced.get("startupTimeout", model.entry.get("startupTimeout", default))
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        return []  # reported by the limits rule
    if timeout >= LOAD_TIME_MARGIN * load_s:
        return []
    severity = ERROR if timeout < load_s else WARNING
    return [
        Finding(
            severity,
            ctx.props.where("models" if "startupTimeout" in model.entry else "default_startup_timeout"),
            f"{model.name}: startupTimeout {timeout:g} s, and its artifact took {load_s:g} s to load when built",
            "TorchServe kills a worker still loading at the timeout and starts it again, forever",
            f"startupTimeout (or default_startup_timeout) >= {int(LOAD_TIME_MARGIN * load_s) + 1}",
        )
    ]


def _pairs(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return _importable(distribution.replace("-", "_"))


def install_deps(ctx: Context) -> bool:
    return is_true(ctx.props.get("install_py_dep_per_model", "false"))
