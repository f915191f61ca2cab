"""Resolve, compile and verify: everything `archive` does before packing, and all `compile` does."""

from __future__ import annotations

import copy
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tsvk import defaults
from tsvk.settings import ArtifactSettings, HandlerSettings, RuntimeSettings, ServingDefaults

from .backends import CompileTarget, check_target, get_backend, prepare_model
from .errors import UsageError
from .models import CustomModel, ResolvedModel, resolve_model
from .verify import Tolerance, VerificationReport, verify_artifact


@dataclass(frozen=True)
class BuildRequest:
    model: str
    backend: str = defaults.BACKEND
    device: str = defaults.DEVICE
    precision: str = defaults.PRECISION
    max_batch: int = defaults.MAX_BATCH
    weights: str = defaults.WEIGHTS
    custom: CustomModel | None = None
    tolerance: Tolerance | None = None
    serving: ServingDefaults = field(default_factory=ServingDefaults)
    topk: int = defaults.TOPK
    jpeg_dct_scaling: bool = True  # False: decode large JPEGs at full size (the exact, slower path)


@dataclass
class BuildResult:
    resolved: ResolvedModel
    artifact: Path
    settings: HandlerSettings
    report: VerificationReport
    seconds: float


def build(request: BuildRequest, workdir: Path) -> BuildResult:
    """Compile into `workdir` and verify; raise UsageError (nothing usable left) when verification fails."""
    started = time.perf_counter()
    backend = get_backend(request.backend)
    check_target(backend, request.device, request.precision)
    request = _clamp_suggested_batch(request)
    resolved = resolve_model(request.model, request.weights, request.custom)
    target = CompileTarget(request.device, request.precision, request.max_batch, resolved.preprocess.crop)
    eager_fp32 = resolved.model.to(request.device)
    artifact = Path(workdir) / backend.file_name
    _compile(backend, prepare_model(copy.deepcopy(eager_fp32), target), target, artifact, request)
    compiled = backend.load(artifact, request.device, prepare_model(copy.deepcopy(eager_fp32), target))
    report = verify_artifact(compiled, eager_fp32, target, request.tolerance)
    print(f"{request.model} [{backend.name}/{request.device}/{request.precision}] {report.describe()}")
    if not report.passed:
        raise UsageError(f"{report.describe()}; no archive written (loosen with --tolerance atol,rtol,min_top1 only if you accept it)")
    seconds = time.perf_counter() - started
    settings = _settings(request, resolved, artifact, report, seconds)
    return BuildResult(resolved, artifact, settings, report, seconds)


def _clamp_suggested_batch(request: BuildRequest) -> BuildRequest:
    """The suggested serving batch can never exceed what the artifact accepts."""
    if request.serving.batch_size <= request.max_batch:
        return request
    return replace(request, serving=replace(request.serving, batch_size=request.max_batch))


def _compile(backend, model, target: CompileTarget, artifact: Path, request: BuildRequest) -> None:
    import torch

    try:
        with torch.no_grad():
            backend.compile(model, target, artifact)
    except UsageError:
        raise
    except Exception as err:  # compilers fail in many ways; the user needs the backend and the cause
        raise UsageError(f"--backend {backend.name} failed to compile {request.model}: {type(err).__name__}: {err}. "
                         f"Try --backend export or --backend eager to narrow it down") from err


def _settings(request: BuildRequest, resolved: ResolvedModel, artifact: Path, report, seconds: float) -> HandlerSettings:
    import torch
    import torchvision

    return HandlerSettings(
        model_name=request.model,
        artifact=ArtifactSettings(
            file=artifact.name, format=request.backend, device=request.device,
            precision=request.precision, max_batch=request.max_batch, source=resolved.source,
        ),
        preprocess=replace(resolved.preprocess, jpeg_dct_scaling=request.jpeg_dct_scaling),
        runtime=RuntimeSettings(topk=request.topk),
        serving=request.serving,
        provenance={
            "weights": resolved.weights,
            "verification": report.to_dict(),
            "build_seconds": round(seconds, 1),
            "built_with": {"torch": str(torch.__version__), "torchvision": str(torchvision.__version__), "python": platform.python_version()},
        },
    )
