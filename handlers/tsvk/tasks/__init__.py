"""The tasks a served model performs, one object each: every fact a worker asks about a task.

A task's transform and answer live in its own module (`classify.py`, `detect.py`, `segment.py`: a
`Task` subclass); what the rest of the package needs to know about it (which handler module TorchServe
loads, what the model takes, how its eager model is served) is written once here, in its `TaskKind`.
Code asks `task_kind(name)` instead of comparing names. The build-time facts (compile backends,
verification, calibration) live in `tsvk_tools.build.task_builds`, keyed by the same names.

This module imports nothing of the package: the settings schema validates a task's name here, and
every task module imports the settings schema, so a `TaskKind` names its class by module and name
and imports it when first asked (`task_class`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Task

__all__ = ["TASKS", "TaskKind", "task_kind"]


@dataclass(frozen=True)
class TaskKind:
    name: str
    handler_file: str  # the thin TorchServe handler module packed for it (handlers/<file>, one class each)
    module: str  # tsvk.tasks.<module> defines its Task subclass, `class_name`
    class_name: str
    crops: bool  # the model takes one NCHW batch of square center crops (preprocess.crop); else whole photos, resized
    image_list: bool  # the model takes a list of (3, h, w) images of their own sizes, not one NCHW batch
    backbone_weights: bool  # torchvision's builders for it take weights_backbone (set to None: nothing downloaded)
    openvino_backbone: bool  # its OpenVINO artifact holds the backbone only; the eager heads (model code) run over it
    top_k: bool  # answers top-k classes: the Open Inference Protocol's tensors are stated for these only

    def task_class(self) -> type[Task]:
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.class_name)

    def served_form(self, model: Any) -> Any:
        """The eager model as it is served and compiled (a detector takes prepared images: detector_model.py)."""
        return self.task_class().served_form(model)

    def torchvision_model(self, builder: str, num_classes: int | None = None) -> Any:
        """A torchvision builder's model with random weights, in its served form; nothing is downloaded
        (detection and segmentation builders would fetch backbone weights unless told not to)."""
        import torchvision

        extra: dict[str, Any] = {"num_classes": num_classes} if num_classes else {}
        if self.backbone_weights:
            extra["weights_backbone"] = None
        return self.served_form(torchvision.models.get_model(builder, weights=None, **extra))


CLASSIFY = TaskKind("classify", "image_classifier.py", "classify", "ClassifyTask", crops=True, image_list=False,
                    backbone_weights=False, openvino_backbone=False, top_k=True)
DETECT = TaskKind("detect", "object_detector.py", "detect", "DetectTask", crops=False, image_list=True,
                  backbone_weights=True, openvino_backbone=True, top_k=False)
SEGMENT = TaskKind("segment", "image_segmenter.py", "segment", "SegmentTask", crops=False, image_list=False,
                   backbone_weights=True, openvino_backbone=False, top_k=False)
# What the model answers: top-k classes, boxes (and masks), a label map.
TASKS: dict[str, TaskKind] = {kind.name: kind for kind in (CLASSIFY, DETECT, SEGMENT)}


def task_kind(name: str) -> TaskKind:
    if name not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {name!r}")
    return TASKS[name]
