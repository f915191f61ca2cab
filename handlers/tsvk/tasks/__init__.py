"""Each task's transform and answer (a `Task` subclass per task), and the model forms tasks serve.

The facts about a task that need no task code (its handler file, what its model takes) are its `TaskKind`
in `common/task_kinds.py`; the class that runs it is looked up here by the same name, so nothing
below this room needs the task classes and nothing loads them by name. `__all__` is what tools/ may import.
"""

from __future__ import annotations

from typing import Any

from ..common.task_kinds import task_kind
from .answers import first_tensor
from .base import Task
from .classify import ClassifyTask
from .detect import DetectTask
from .detector_model import detections, detections_per_image_of, score_threshold_of, set_score_threshold
from .loaded_model import LoadedModel
from .rle import decode_mask
from .segment import SegmentTask, resize_groups

TASK_CLASSES: dict[str, type[Task]] = {task.name: task for task in (ClassifyTask, DetectTask, SegmentTask)}

__all__ = ["TASK_CLASSES", "LoadedModel", "Task", "decode_mask", "detections", "detections_per_image_of", "first_tensor",
           "resize_groups", "score_threshold_of", "served_form", "set_score_threshold", "task_class", "torchvision_model"]


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
