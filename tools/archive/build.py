"""Resolve, compile and verify: everything `archive` does before packing, and all `compile` does."""

from __future__ import annotations

import copy
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tsvk.common import ArtifactSettings, DetectSettings, HandlerSettings, RuntimeSettings, ServingDefaults, task_kind
from tsvk import model as tsvk_model, tasks  # their names import torch on first use, not with this module

from .. import defaults, progress
from .backends import CompileTarget, check_target, get_backend, prepare_model
from .calibration import Photos, accuracy_photos, int8_photos
from ..errors import UsageError
from .models import CustomModel, ResolvedModel, resolve_model, torchvision_builders
from .precision import AUTO, PrecisionChoice, choose_precision
from .task_builds import check_bf16_task, check_int8_task, check_task, task_build
from .verify import Tolerance, VerificationReport
from .verify_int8 import AgreementReport, Int8Limits, PixelAgreementReport


# The photo options and the builds they apply to.
PHOTO_OPTIONS = {"--calibration": "--precision int8 only", "--accuracy-photos": "--precision bf16 only",
                 "--max-accuracy-drop": "builds judged on labelled photos only (--precision int8 with --calibration, bf16 "
                                        "with --accuracy-photos)"}


@dataclass(frozen=True)
class BuildRequest:
    model: str
    backend: str | None = None  # None: the task's default (task_builds.TaskBuild.default_backend)
    device: str = defaults.DEVICE
    precision: str = defaults.BUILD_PRECISION  # auto: bf16 where this CPU multiplies it in hardware (precision.py)
    max_batch: int = defaults.MAX_BATCH
    weights: str = defaults.WEIGHTS
    custom: CustomModel | None = None
    labels: Path | None = None  # a torchvision builder's class names (a model file's come in `custom`)
    tolerance: Tolerance | None = None
    serving: ServingDefaults = field(default_factory=ServingDefaults)
    topk: int = defaults.TOPK
    jpeg_dct_scaling: bool = True  # False: decode large JPEGs at full size (the exact, slower path)
    calibration: Path | None = None  # int8: a directory of real photos (some calibrate, the rest verify)
    accuracy_photos: Path | None = None  # bf16: labelled photos on which its accuracy is compared with eager fp32
    max_accuracy_drop: float | None = None  # on labelled photos: top-1 and top-5 may fall by this (None: by precision)
    task: str | None = None  # --task: a model file's task; for a torchvision builder, it must agree with torchvision's
    score_threshold: float = defaults.SCORE_THRESHOLD  # detect: the answers' default score threshold
    max_detections: int = defaults.MAX_DETECTIONS  # detect: the answers' default box count
    cpu_isa: str = defaults.CPU_ISA  # aoti on the cpu: native (this CPU's widest vectors) or avx2 (any x86-64 with AVX2)


@dataclass
class BuildResult:
    resolved: ResolvedModel
    artifact: Path
    settings: HandlerSettings
    report: VerificationReport | AgreementReport | PixelAgreementReport
    seconds: float


def build(request: BuildRequest, workdir: Path) -> BuildResult:
    """Compile into `workdir` and verify; raise UsageError (nothing usable left) when verification fails. A precision
    the user did not ask for (auto's bf16) that fails to compile or verify gives way to fp32, said in one line."""
    started = time.perf_counter()
    task = requested_task(request)
    backend = get_backend(request.backend or default_backend(task))
    choice = choose_precision(request.precision, backend, request.device, task)
    print(f"{request.model}: {choice.describe()}")
    request = replace(request, precision=choice.chosen)
    check_target(backend, request.device, request.precision)
    check_task(backend.name, task)
    check_bf16_task(task, request.precision, request.device)
    check_cpu_isa(backend.name, request)
    request = _clamp_suggested_batch(request)
    with progress.step(f"load {request.model}", f"its weights ({request.weights})"):
        resolved = resolve_model(request.model, request.weights, request.custom, request.task, request.labels)
    check_int8_task(resolved.task, backend.name, request)
    preprocess = replace(resolved.preprocess, jpeg_dct_scaling=request.jpeg_dct_scaling)
    try:
        made = _compile_and_verify(request, backend, resolved, preprocess, workdir, choice)
    except UsageError as err:
        if not choice.may_fall_back:
            raise
        choice = choice.falling_back(str(err))
        print(f"{request.model}: the bf16 build failed, building fp32 instead: {err}", file=sys.stderr)
        made = _compile_and_verify(replace(request, precision="fp32"), backend, resolved, preprocess, workdir, choice)
    artifact, artifact_settings, report, photos, compile_facts = made
    seconds = time.perf_counter() - started
    settings = _settings(replace(request, precision=choice.chosen), resolved, artifact_settings, preprocess, report, seconds,
                         photos, compile_facts, choice)
    return BuildResult(resolved, artifact, settings, report, seconds)


def _compile_and_verify(request: BuildRequest, backend, resolved: ResolvedModel, preprocess, workdir: Path,
                        choice: PrecisionChoice) -> tuple:
    """The artifact in `request.precision`, loaded back by the worker's loader and verified against eager fp32:
    (artifact path, its settings, the report, the photos used, facts for the provenance)."""
    with progress.step("prepare photos", "decoding the calibration or accuracy photos"):
        photos = _photos(request, resolved, preprocess, choice)
    target = CompileTarget(request.device, request.precision, request.max_batch, preprocess.crop,
                           calibration=photos.calibration.batch if photos and photos.calibration else None,
                           task=resolved.task, size=example_size(preprocess), max_side=preprocess.max_size,
                           cpu_isa=request.cpu_isa)
    eager_fp32 = resolved.model.to(request.device)
    artifact = Path(workdir) / backend.file_name
    artifact_settings = ArtifactSettings(file=artifact.name, format=backend.name, device=request.device,
                                         precision=request.precision, max_batch=request.max_batch, source=resolved.source,
                                         **built_on(request.device))
    with progress.step(f"compile with {backend.name}", f"{backend.name} on {request.device}, {request.precision}, "
                                                       f"batches 1..{request.max_batch}"):
        compile_facts = _compile(backend, prepare_model(copy.deepcopy(eager_fp32), target), target, artifact, request)
    with progress.step("load the artifact back", "the worker's loader") as loading:
        compiled = _load_back(artifact_settings, artifact, target, resolved, request.custom)
        load_seconds = loading.elapsed()
    with progress.step("verify against eager", f"the artifact and the eager model at batch 1 and {request.max_batch}"):
        report = _verify(compiled, eager_fp32, target, request, photos, resolved)
    print(f"{request.model} [{backend.name}/{request.device}/{request.precision}] {report.describe()}")
    if not report.passed:
        raise UsageError(f"{report.describe()}; no archive written ({remedy(report)})")
    return artifact, artifact_settings, report, photos, {**(compile_facts or {}), "load_seconds": round(load_seconds, 2)}


def remedy(report) -> str:
    """How to accept a refused build: the report's own advice where it names its criteria, else the tolerance."""
    return report.remedy() if hasattr(report, "remedy") else "loosen with --tolerance atol,rtol,min_top1 only if you accept it"


def built_on(device: str) -> dict[str, str]:
    """The GPU a CUDA build runs on, as the archive records it (name and compute capability); nothing for the CPU."""
    if device != "cuda":
        return {}
    import torch

    name, capability = tsvk_model.gpu_architecture(torch.device("cuda", torch.cuda.current_device()))
    return {"gpu": name, "compute_capability": capability}


def check_cpu_isa(backend: str, request: BuildRequest) -> None:
    """Only an AOTInductor CPU package is compiled for particular CPU instructions: the others choose at load."""
    if request.cpu_isa != defaults.CPU_ISA and (backend != "aoti" or request.device != "cpu"):
        raise UsageError(f"--cpu-isa {request.cpu_isa} applies to --backend aoti --device cpu only (this build: {backend} on "
                         f"{request.device}); the other backends pick their CPU kernels where they run")


def default_backend(task: str) -> str:
    return task_build(task).default_backend


def requested_task(request: BuildRequest) -> str:
    """The task before anything is built: a model file's --task, or what torchvision lists the builder under."""
    if request.custom is not None:
        return request.custom.task
    return torchvision_builders().get(request.model, request.task or defaults.TASK)


def _photos(request: BuildRequest, resolved: ResolvedModel, preprocess, choice: PrecisionChoice) -> Photos | None:
    """int8's calibration and held-out photos, bf16's accuracy photos; photo options that do not apply to the precision
    built are refused or set aside (`_check_photo_options`)."""
    if request.precision == "int8":
        return _int8_photos(request, resolved, preprocess)
    if request.precision == "bf16" and request.accuracy_photos is not None:
        if not task_build(resolved.task).int8_accuracy:
            raise UsageError(f"--accuracy-photos applies to classifiers, judged by top-1 and top-5 accuracy; the "
                             f"{resolved.task} model {request.model} is judged by its own verification: leave it out")
        return accuracy_photos(request.accuracy_photos, preprocess, resolved.task)
    _check_photo_options(request, choice)
    return None


def _check_photo_options(request: BuildRequest, choice: PrecisionChoice) -> None:
    """Photo options that do not apply to the precision built: refused, except that auto sets aside the bf16 ones when
    it chose fp32 (the same command builds on every CPU), saying so once. --calibration is int8's wherever it runs."""
    given = [flag for flag, value in (("--calibration", request.calibration is not None),
                                      ("--accuracy-photos", request.accuracy_photos is not None),
                                      ("--max-accuracy-drop", _asked_drop(request))) if value]
    set_aside = [flag for flag in given if flag != "--calibration"] if choice.asked == AUTO else []
    if set_aside:
        print(f"{request.model}: {', '.join(set_aside)} set aside: the {request.precision} artifact is verified against "
              f"eager by its outputs", file=sys.stderr)
    refused = [flag for flag in given if flag not in set_aside]
    if refused:
        chose = f", which chose {request.precision}" if choice.asked == AUTO else ""
        raise UsageError(f"{refused[0]} applies to {PHOTO_OPTIONS[refused[0]]} (got --precision {choice.asked}{chose})")


def _int8_photos(request: BuildRequest, resolved: ResolvedModel, preprocess) -> Photos | None:
    """The calibration photos int8 quantizes with, and those held out to verify it."""
    if request.accuracy_photos is not None:
        raise UsageError("--accuracy-photos applies to --precision bf16; int8 holds out part of --calibration to verify")
    random_weights = bool(resolved.weights.get("random"))
    if _asked_drop(request) and not task_build(resolved.task).int8_accuracy:
        raise UsageError(f"--max-accuracy-drop applies to classifiers, whose int8 is judged by top-1 and top-5 accuracy; "
                         f"the {resolved.task} model {request.model} is judged by its own verification: leave it out")
    if task_build(resolved.task).verify_int8 is None:  # dynamic int8: nothing to calibrate; its verifier judges it
        if request.calibration is not None:
            raise UsageError("--calibration: a detector's int8 quantizes its box head's activations as they come "
                             "(dynamic int8) and needs no calibration photos; leave it out")
        return None
    if random_weights:
        _warn_random_int8()
    return int8_photos(request.calibration, preprocess, random_weights, resolved.task)


def _asked_drop(request: BuildRequest) -> bool:
    """Whether the request asks for an accuracy drop of its own (else the precision's default applies)."""
    return request.max_accuracy_drop is not None


def max_accuracy_drop(request: BuildRequest) -> float:
    """How far top-1 and top-5 may fall on labelled photos: as asked, else the precision's default."""
    if request.max_accuracy_drop is not None:
        return request.max_accuracy_drop
    return defaults.BF16_MAX_ACCURACY_DROP if request.precision == "bf16" else defaults.INT8_MAX_ACCURACY_DROP


def _warn_random_int8() -> None:
    print("=" * 78, file=sys.stderr)
    print("--precision int8 with random weights: ACCURACY CANNOT BE MEASURED. Calibrating on the photos", file=sys.stderr)
    print("given (or scikit-image's); agreement is reported but no threshold is applied.", file=sys.stderr)
    print("=" * 78, file=sys.stderr)


def _load_back(artifact_settings: ArtifactSettings, artifact: Path, target: CompileTarget, resolved: ResolvedModel,
               custom: CustomModel | None):
    """The artifact as a worker will run it: loaded by the handler's own loader from a directory laid out
    as the archive is (the artifact, plus the model code that a custom model's eager state_dict needs)."""
    import torch

    needs_code = artifact_settings.format == "eager" or (artifact_settings.format == "openvino"
                                                         and task_kind(target.task).openvino_backbone)
    if needs_code and custom is not None and not (artifact.parent / custom.file.name).exists():
        shutil.copy2(custom.file, artifact.parent / custom.file.name)
    num_classes = len(resolved.labels) if resolved.labels else None
    return tsvk_model.load_model(artifact_settings, artifact.parent, torch.device(target.device), num_classes=num_classes,
                      task=resolved.task).forward


def example_size(preprocess) -> tuple[int, int]:
    """A typical model input (height, width) for detect and segment: a 4:3 landscape photo after the resize."""
    if preprocess.fixed_size:
        return preprocess.fixed_size[1], preprocess.fixed_size[0]
    width = preprocess.resize * 4 // 3
    return preprocess.resize, min(width, preprocess.max_size) if preprocess.max_size else width


def _verify(compiled, eager_fp32, target: CompileTarget, request: BuildRequest, photos: Photos | None, resolved: ResolvedModel):
    task = task_build(target.task)
    random_weights = bool(resolved.weights.get("random"))
    if photos is None:
        return task.verify(compiled, eager_fp32, target, request.tolerance, random_weights)
    held_out = photos.held_out is not None
    measured_on = photos.held_out if held_out else photos.calibration
    limits = Int8Limits(min_agreement=request.tolerance.min_top1 if request.tolerance else None,
                        max_drop=max_accuracy_drop(request))
    return task.verify_int8(compiled, eager_fp32, target, measured_on, held_out, not random_weights, limits)


def _clamp_suggested_batch(request: BuildRequest) -> BuildRequest:
    """The suggested serving batch can never exceed what the artifact accepts."""
    if request.serving.batch_size <= request.max_batch:
        return request
    return replace(request, serving=replace(request.serving, batch_size=request.max_batch))


def _compile(backend, model, target: CompileTarget, artifact: Path, request: BuildRequest) -> dict | None:
    import torch

    try:
        with torch.no_grad():
            return backend.compile(model, target, artifact)
    except UsageError:
        raise
    except Exception as err:  # compilers fail in many ways; the user needs the backend and the cause
        raise UsageError(f"--backend {backend.name} failed to compile {request.model}: {type(err).__name__}: {err}. "
                         f"Try --backend export or --backend eager to narrow it down") from err


def _settings(request: BuildRequest, resolved: ResolvedModel, artifact: ArtifactSettings, preprocess, report, seconds: float,
              photos: Photos | None, compile_facts: dict | None, choice: PrecisionChoice) -> HandlerSettings:
    return HandlerSettings(
        model_name=request.model,
        artifact=artifact,
        task=resolved.task,
        preprocess=preprocess,
        runtime=RuntimeSettings(topk=request.topk),
        detect=detect_settings(request, resolved.model) if task_kind(resolved.task).image_list else DetectSettings(),
        serving=request.serving,
        provenance={
            "weights": resolved.weights,
            "verification": report.to_dict(),
            "precision": choice.to_dict(),
            **({_photos_key(request.precision): photos.provenance} if photos else {}),
            "compile": compile_facts,  # load_seconds: loading the artifact back, what a worker does at start
            "build_seconds": round(seconds, 1),
            "built_with": _versions(request),
        },
    )


def _photos_key(precision: str) -> str:
    """Where the provenance keeps the photos a build used: int8 calibrates on them, bf16 is only judged on them."""
    return "calibration" if precision == "int8" else "accuracy_photos"


def detect_settings(request: BuildRequest, model) -> DetectSettings:
    """The answers' defaults, and the lowest score the model keeps: its own, or lower where the default asks for less."""
    heads = getattr(model, "roi_heads", None)
    return DetectSettings(
        score_threshold=request.score_threshold,
        max_detections=min(request.max_detections, tasks.detections_per_image_of(model)),
        score_floor=min(tasks.score_threshold_of(model), request.score_threshold),
        masks=bool(heads is not None and heads.has_mask()),
    )


def _versions(request: BuildRequest) -> dict[str, str]:
    import importlib.metadata

    import torch
    import torchvision

    versions = {"torch": str(torch.__version__), "torchvision": str(torchvision.__version__), "python": platform.python_version()}
    int8 = request.precision == "int8"
    extra = (["openvino"] if request.backend == "openvino" else []) + (["nncf"] if int8 and request.backend == "openvino" else []) \
        + (["torchao"] if int8 and request.backend == "aoti" else [])
    return {**versions, **{name: importlib.metadata.version(name) for name in extra}}
