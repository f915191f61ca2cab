"""The task classes by name, and the model forms they serve: what `task_class` looks up."""

from __future__ import annotations

from typing import Any

from ..common.task_kinds import task_kind
from .base import Task
from .classify import ClassifyTask
from .detect import DetectTask
from .segment import SegmentTask

TASK_CLASSES: dict[str, type[Task]] = {task.name: task for task in (ClassifyTask, DetectTask, SegmentTask)}


def task_class(name: str) -> type[Task]:
    """The `Task` subclass that serves the task `name` (ValueError naming the tasks when there is none)."""
    task_kind(name)
    return TASK_CLASSES[name]


def served_form(task: str, model: Any) -> Any:
    """The eager model as it is served and compiled (a detector takes prepared images: detector_model.py)."""
    return task_class(task).served_form(model)


def torchvision_model(task: str, builder: str, num_classes: int | None = None) -> Any:
    """A torchvision builder's model with random weights, in its served form; nothing is downloaded
    (detection and segmentation builders would fetch backbone weights unless told not to)."""
    import torchvision  # heavy: only callers that build a model pay for it

    extra: dict[str, Any] = {"num_classes": num_classes} if num_classes else {}
    if task_kind(task).backbone_weights:
        extra["weights_backbone"] = None
    return served_form(task, torchvision.models.get_model(builder, weights=None, **extra))
