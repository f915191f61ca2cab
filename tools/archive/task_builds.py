"""What a build needs to know about each task, keyed by the run-time registry's names (`tsvk.tasks.TASKS`).

The run-time facts of a task (its handler module, what its model takes, its served form) are its
`tsvk.tasks.TaskKind`; the build-time ones are here, written once: which compile backends can build
it and which one it gets by default, where its int8 can be verified, how its artifact is verified,
whether int8 calibrates on photos, and how its preprocessing is read from a model. A new task is a
`TaskKind` there and a `TaskBuild` here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

from tsvk.common import TASK_KINDS as TASKS, TaskKind

from .. import defaults
from . import task_preprocess
from .backends import BACKENDS
from ..errors import UsageError

_EXPORT_DETECTOR = ("torch.export cannot capture a torchvision detector: non-maximum suppression keeps a number of "
                    "boxes that depends on the image (GuardOnDataDependentSymNode in batched_nms)")


@dataclass(frozen=True)
class TaskBuild:
    kind: TaskKind
    default_backend: str  # --backend when none is asked for
    # (compiled, eager_fp32, target, tolerance, random_weights) -> report: the artifact against eager, no photos
    verify: Callable
    preprocess: Callable  # (torchvision model, its weights' metadata) -> PreprocessSettings
    custom_preprocess: Callable  # (CustomModel, model) -> PreprocessSettings, from --resize/--crop/--mean/--std
    torchvision_models: str  # the torchvision module whose builders serve this task
    unsupported: Mapping[str, str] = field(default_factory=dict)  # backend -> why it cannot build this task
    int8_backends: tuple[str, ...] | None = None  # where its int8 can be verified; None: every backend with int8
    # (compiled, eager_fp32, target, photos, held_out, enforce, Int8Limits) -> report, on calibration photos;
    # None: its int8 needs no photos (dynamic int8) and `verify` judges it
    verify_int8: Callable | None = None
    int8_accuracy: bool = False  # its int8 verifier judges top-1 and top-5 accuracy on labelled photos (--max-accuracy-drop)
    no_bf16: str = ""  # why it is not built in bf16 (then --precision auto gives fp32 and --precision bf16 is refused)

    @property
    def name(self) -> str:
        return self.kind.name


def _on_use(module: str, name: str) -> Callable:
    """`module`'s function `name`, imported when first called: the verifiers import torch, seconds of start that
    reading the tasks' build facts (the bench's options, `tsvk --help`) does not need."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module, __package__), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


verify_artifact = _on_use(".verify", "verify_artifact")
verify_detector = _on_use(".verify_tasks", "verify_detector")
verify_segmenter = _on_use(".verify_tasks", "verify_segmenter")
verify_int8 = _on_use(".verify_int8", "verify_int8")
verify_segmenter_int8 = _on_use(".verify_int8", "verify_segmenter_int8")


def _without_random(verify: Callable) -> Callable:
    """A verifier that judges the same with random and trained weights."""
    return lambda compiled, eager_fp32, target, tolerance, random_weights: verify(compiled, eager_fp32, target, tolerance)


def _detector(compiled, eager_fp32, target, tolerance, random_weights):
    return verify_detector(compiled, eager_fp32, target, random_weights, tolerance)


# torchvision 0.29's non-maximum suppression has no bf16 kernel on the CPU (csrc/ops/cpu/nms_kernel.cpp).
_BF16_DETECTOR = "torchvision's non-maximum suppression has no bf16 CPU kernel (nms_kernel not implemented for 'BFloat16')"

_BUILDS = (
    TaskBuild(TASKS["classify"], default_backend=defaults.BACKEND, verify=_without_random(verify_artifact),
              preprocess=task_preprocess.classifier_weights, custom_preprocess=task_preprocess.classifier_custom,
              torchvision_models="torchvision.models", verify_int8=verify_int8, int8_accuracy=True),
    # int8 detectors: OpenVINO backbone, dynamic int8 box head, judged by the head's outputs and, trained, the boxes.
    TaskBuild(TASKS["detect"], default_backend=defaults.DETECT_BACKEND, verify=_detector,
              preprocess=task_preprocess.detector_weights, custom_preprocess=task_preprocess.detector_custom,
              torchvision_models="torchvision.models.detection", int8_backends=("openvino",),
              unsupported={"aoti": _EXPORT_DETECTOR, "export": _EXPORT_DETECTOR,
                           "tensorrt": _EXPORT_DETECTOR + " (Torch-TensorRT's dynamo path starts from torch.export)"},
              no_bf16=_BF16_DETECTOR),
    TaskBuild(TASKS["segment"], default_backend=defaults.BACKEND, verify=_without_random(verify_segmenter),
              preprocess=task_preprocess.segmenter_weights, custom_preprocess=task_preprocess.segmenter_custom,
              torchvision_models="torchvision.models.segmentation", int8_backends=("openvino",),
              unsupported={"tensorrt": "not built for dynamic height and width here yet"},
              verify_int8=verify_segmenter_int8),
)
TASK_BUILDS: dict[str, TaskBuild] = {build.name: build for build in _BUILDS}


def task_build(name: str) -> TaskBuild:
    if name not in TASK_BUILDS:
        raise UsageError(f"--task must be one of {', '.join(TASK_BUILDS)}, got {name!r}")
    return TASK_BUILDS[name]


def task_backends(task: str) -> list[str]:
    """The compile backends that can build the task."""
    return [name for name in BACKENDS if name not in task_build(task).unsupported]


def check_task(backend: str, task: str) -> None:
    """Refuse a backend that cannot serve the task, saying why and which can."""
    reason = task_build(task).unsupported.get(backend)
    if reason:
        raise UsageError(f"--backend {backend} cannot build a {task} model: {reason}; for {task} use "
                         f"--backend {' or '.join(task_backends(task))}")


def check_bf16_task(task: str, precision: str, device: str) -> None:
    """Refuse bf16 on the CPU for a task whose models cannot run it there, saying why (before minutes of loading and
    compiling)."""
    why_not = task_build(task).no_bf16
    if precision == "bf16" and device == "cpu" and why_not:
        raise UsageError(f"--precision bf16 cannot build a {task} model: {why_not}; use --precision fp32 (or int8)")


def check_int8_task(task: str, backend: str, request) -> None:
    """int8 where it can be verified (`int8_backends`): a BuildRequest's precision, for its model."""
    allowed = task_build(task).int8_backends
    if request.precision != "int8" or allowed is None or backend in allowed:
        return
    raise UsageError(f"--precision int8 for the {task} model {request.model} needs --backend {' or '.join(allowed)} "
                     f"(got {backend})")
