"""Object detection: each image resized keeping its own scale, the detector run on the batch, and
boxes (and instance masks) mapped back to each ORIGINAL photo.

The answer per image is a list of {label, score, box: [x1, y1, x2, y2]} in the photo's pixels (as
displayed, EXIF orientation applied), best first, filtered by score and count (the archive's
defaults, or the request's `score_threshold` and `max_detections` options). Mask R-CNN answers carry each
instance mask as COCO RLE at the photo's size, pasted exactly as torchvision pastes them but one box at
a time (tasks/masks.py), so memory follows the largest box, not the number of masks times the photo; where
an image's boxes together would paste more than `detect.max_mask_pixels`, its masks come at a reduced
resolution, each with `photo_size`.
"""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Any, Iterator, Sequence

import torch

from ..preprocess.decode import EncodedImage
from ..common.defaults import MAX_DETECTIONS_LIMIT
from ..common.labels import label_for
from ..preprocess import PreprocessResult
from ..preprocess.base import budget_slices
from ..preprocess.tensor_ops import as_batch
from .roi_pool import gather_roi_pooling
from .base import PartPace, Task
from .detector_model import detections, is_detector, served_detector, set_score_threshold
from .geometry import detector_resize, map_boxes, original_size, same_size_slices
from .params import number, whole
from .masks import encode_masks

BOX_DECIMALS = 2


@dataclass
class DetectBatch:
    """The detector's inputs, one (3, h, w) tensor per kept image, with the sizes to map back."""

    inputs: list[torch.Tensor]
    resized: list[tuple[int, int]]
    original: list[tuple[int, int]]


class DetectTask(Task):
    name = "detect"
    parameters = ("score_threshold", "max_detections")

    def __init__(self, settings, model, preprocessor, labels):
        super().__init__(settings, model, preprocessor, labels)
        self.mean = torch.tensor(settings.preprocess.mean, device=model.device).view(1, 3, 1, 1)
        self.std = torch.tensor(settings.preprocess.std, device=model.device).view(1, 3, 1, 1)
        set_score_threshold(model.forward, settings.detect.score_floor)  # the lowest a request may ask for

    @staticmethod
    def served_form(model: Any) -> Any:
        """A detector takes prepared images: the served form leaves its own resize out (detector_model.py)."""
        if not is_detector(model):
            raise TypeError(f"a detection model must be a torchvision-style detector with a GeneralizedRCNNTransform "
                            f"`transform` (Faster/Mask R-CNN, RetinaNet, FCOS, SSD), got {type(model).__name__}")
        return served_detector(model)

    @staticmethod
    def on_cpu(model: Any) -> Any:
        """torchvision's CPU RoIAlign is scalar: the same numbers, vectorised (roi_pool.py)."""
        gather_roi_pooling(model)
        return model

    def options(self, request: Any) -> dict:
        detect = self.settings.detect
        return {
            "score_threshold": number(request, "score_threshold", detect.score_threshold, detect.score_floor, 1.0),
            "max_detections": whole(request, "max_detections", detect.max_detections, 1, MAX_DETECTIONS_LIMIT),
        }

    def prepare(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        """Decoded and resized a chunk at a time (`Preprocessor.in_chunks`): only the resized inputs stay."""
        parts, failed = self.preprocessor.in_chunks(images, self.resize_each)
        kept = [index for indices, _ in parts for index in indices]
        if not kept:
            return PreprocessResult(None, kept, failed)
        inputs = [tensor for _, tensors in parts for tensor in tensors]
        resized = [(int(x.shape[-2]), int(x.shape[-1])) for x in inputs]
        return PreprocessResult(DetectBatch(inputs, resized, [original_size(images[i]) for i in kept]), kept, failed)

    def normalize(self, batch: torch.Tensor) -> torch.Tensor:
        """uint8 -> (x / 255 - mean) / std in float32, in torchvision's order of operations: the detector then
        sees the very numbers torchvision's own transform would give it (boxes of equal score stay in the
        same order). In place on one fresh copy: three passes over a new photo-sized tensor each cost
        more in page faults than in arithmetic (1.1 vs 3.2 ms for a 640x480 photo)."""
        return batch.to(torch.float32, copy=True).div_(255).sub_(self.mean).div_(self.std)

    def resize_each(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """Normalized and resized per image, one call per slice of same-size images (`same_size_slices`:
        the float copy of a slice stays within its budget); in input order."""
        out: list[torch.Tensor] = [torch.empty(0)] * len(images)
        for indices in same_size_slices(images):
            group = detector_resize(self.normalize(as_batch([images[i] for i in indices])), self.settings.preprocess)
            group = group.to(self.model.input_dtype).contiguous()
            for slot, index in enumerate(indices):
                out[index] = group[slot]
        return out

    def answer(self, batch: DetectBatch, options: Sequence[dict]) -> list[Any]:
        return self.answer_within(batch, options, None)

    def answer_within(self, batch: DetectBatch, options: Sequence[dict], until_s: float | None) -> list[Any]:
        """Forward slice by forward slice while time allows: an R-CNN's batch on a CPU can take minutes."""
        found: list[dict] = []
        pace = PartPace(until_s)
        for part in self.forward_slices(batch.inputs):
            if not pace.allows(len(part)):
                break
            started = time.perf_counter()
            found += detections(self.run(list(part)))
            pace.record(len(part), started)
        return [self.describe(*args) for args in zip(found, batch.resized, batch.original, options)]

    def forward_slices(self, inputs: list[torch.Tensor]) -> Iterator[Sequence[torch.Tensor]]:
        """The inputs in forwards the artifact was built for; on a CPU also within `detect.cpu_forward_pixels`
        resized pixels each, so a batch's working memory (padded batch, feature maps, RoI features) follows the
        budget rather than the batch. One CPU thread runs a slice no slower per image than the whole batch."""
        if self.model.device.type != "cpu":
            yield from self.chunks(inputs)
            return
        pixels = [int(x.shape[-2]) * int(x.shape[-1]) for x in inputs]
        for indices in budget_slices(pixels, self.settings.detect.cpu_forward_pixels):
            yield from self.chunks([inputs[i] for i in indices])

    def describe(self, found: dict, resized: tuple[int, int], original: tuple[int, int], options: dict) -> list[dict]:
        """The kept boxes of one image, best first, in the original photo's pixels."""
        scores = found["scores"].float()
        order = torch.argsort(scores, descending=True, stable=True)
        order = order[scores[order] >= options["score_threshold"]][: options["max_detections"]]
        boxes = map_boxes(found["boxes"][order], resized, original)
        answers = [{"label": label_for(self.labels, index), "score": round(score, 6), "box": [round(v, BOX_DECIMALS) for v in box]}
                   for index, score, box in zip(found["labels"][order].tolist(), scores[order].tolist(), boxes.tolist())]
        if self.settings.detect.masks and "masks" in found:
            detect = self.settings.detect
            encoded = encode_masks(found["masks"][order], boxes, original, detect.mask_threshold, detect.max_mask_pixels)
            for answer, mask in zip(answers, encoded):
                answer["mask"] = mask
        return answers
