"""Each task's transform and answer (a `Task` subclass per task), and the model forms tasks serve.

The facts about a task that need no task code (its handler file, what its model takes) are its `TaskKind`
in `common/task_kinds.py`; the class that runs it is looked up here by the same name, so nothing
below this room needs the task classes and nothing loads them by name. `__all__` is what tools/ may import.

The names are imported on first use (`common/lazy.py`): the task modules import torch and torchvision, which a
command that only reads an archive's settings does not need.
"""

from ..common.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "TASK_CLASSES": ".registry", "task_class": ".registry", "served_form": ".registry", "torchvision_model": ".registry",
    "LoadedModel": ".loaded_model", "Task": ".base", "decode_mask": ".rle", "first_tensor": ".answers",
    "resize_groups": ".segment", "detections": ".detector_model", "detections_per_image_of": ".detector_model",
    "score_threshold_of": ".detector_model", "set_score_threshold": ".detector_model"})

__all__ = ["TASK_CLASSES", "LoadedModel", "Task", "decode_mask", "detections", "detections_per_image_of", "first_tensor",
           "resize_groups", "score_threshold_of", "served_form", "set_score_threshold", "task_class", "torchvision_model"]
