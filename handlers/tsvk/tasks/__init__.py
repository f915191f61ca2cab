"""The tasks a served model performs, by the settings' `task` name: each its transform and its answer."""

from __future__ import annotations

from .base import Task

__all__ = ["Task", "task_class"]


def task_class(name: str) -> type[Task]:
    if name == "detect":
        from .detect import DetectTask

        return DetectTask
    if name == "segment":
        from .segment import SegmentTask

        return SegmentTask
    from .classify import ClassifyTask

    return ClassifyTask


def served_form(task: str, model):
    """The eager model as it is served and compiled: a detector takes prepared images (detector_model.py)."""
    if task == "detect":
        from .detector_model import is_detector, served_detector

        if not is_detector(model):
            raise TypeError(f"a detection model must be a torchvision-style detector with a GeneralizedRCNNTransform "
                            f"`transform` (Faster/Mask R-CNN, RetinaNet, FCOS, SSD), got {type(model).__name__}")
        return served_detector(model)
    return model.eval()


def torchvision_model(builder: str, task: str, num_classes: int | None = None):
    """A torchvision builder's model with random weights, in its served form; nothing is downloaded
    (detection and segmentation builders would fetch backbone weights unless told not to)."""
    import torchvision

    extra = {"num_classes": num_classes} if num_classes else {}
    if task != "classify":
        extra["weights_backbone"] = None
    return served_form(task, torchvision.models.get_model(builder, weights=None, **extra))
