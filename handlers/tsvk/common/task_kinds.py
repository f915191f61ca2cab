"""The tasks a served model performs, one object each: every fact about a task that needs no task code.

A task's transform and answer live in its own module under `tasks/` (a `Task` subclass, found by name in
`tsvk.tasks.TASK_CLASSES`); what the rest of the package needs to know about it (which handler module
TorchServe loads, what the model takes, how its eager model is built) is written once here, in its
`TaskKind`. Code asks `task_kind(name)` instead of comparing names. The build-time facts (compile backends,
verification, calibration) live in `tsvk_tools.archive.task_builds`, keyed by the same names.

This module imports nothing of the package: the settings schema validates a task's name against it, and
the task classes, which read the settings, sit above both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TASKS", "TaskKind", "task_kind"]


@dataclass(frozen=True)
class TaskKind:
    name: str
    handler_file: str  # the thin TorchServe handler module packed for it (handlers/<file>, one class each)
    crops: bool  # the model takes one NCHW batch of square center crops (preprocess.crop); else whole photos, resized
    image_list: bool  # the model takes a list of (3, h, w) images of their own sizes, not one NCHW batch
    backbone_weights: bool  # torchvision's builders for it take weights_backbone (set to None: nothing downloaded)
    openvino_backbone: bool  # its OpenVINO artifact holds the backbone only; the eager heads (model code) run over it
    top_k: bool  # answers top-k classes: the Open Inference Protocol's tensors are stated for these only


CLASSIFY = TaskKind("classify", "image_classifier.py", crops=True, image_list=False,
                    backbone_weights=False, openvino_backbone=False, top_k=True)
DETECT = TaskKind("detect", "object_detector.py", crops=False, image_list=True,
                  backbone_weights=True, openvino_backbone=True, top_k=False)
SEGMENT = TaskKind("segment", "image_segmenter.py", crops=False, image_list=False,
                   backbone_weights=True, openvino_backbone=False, top_k=False)
# What the model answers: top-k classes, boxes (and masks), a label map.
TASKS: dict[str, TaskKind] = {kind.name: kind for kind in (CLASSIFY, DETECT, SEGMENT)}


def task_kind(name: str) -> TaskKind:
    if name not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {name!r}")
    return TASKS[name]
