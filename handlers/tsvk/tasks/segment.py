"""Semantic segmentation: each image's shorter side resized as the weights ask (no crop), images of
one resulting size run as one batch, and the label map mapped back to each ORIGINAL photo.

The answer per image: its size, each class present with its area in the photo's pixels and as a
fraction, and (unless the option `label_map` is false) the label map itself, one class index per pixel, as a
base64 PNG at the photo's size or with its longer side at most `label_map_max_side`, and never over `preprocess.max_pixels`
(a larger photo's map comes scaled down, its shape kept; `width` and `height` say the photo's size).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torchvision.transforms.v2.functional as F

from ..preprocess.decode import EncodedImage
from ..common.labels import label_for
from .answers import first_tensor
from ..preprocess import PreprocessResult
from ..preprocess.tensor_ops import INTERPOLATION_MODES, Normalizer, as_batch
from .base import Task
from .geometry import fit_pixels, fit_within, group_by_size, original_size, resize_label_map, same_size_slices
from .params import flag, whole

FRACTION_DECIMALS = 6


@dataclass
class SegmentBatch:
    """Same-size groups of normalized inputs (kept-image slots and their batch), and each photo's size."""

    groups: list[tuple[list[int], torch.Tensor]]
    original: list[tuple[int, int]]


class SegmentTask(Task):
    name = "segment"
    parameters = ("label_map", "label_map_max_side")

    def __init__(self, settings, model, preprocessor, labels):
        super().__init__(settings, model, preprocessor, labels)
        self.normalize = Normalizer(settings.preprocess, model.device, model.input_dtype)

    def options(self, request: Any) -> dict:
        segment = self.settings.segment
        return {
            "label_map": flag(request, "label_map", segment.label_map),
            "label_map_max_side": whole(request, "label_map_max_side", segment.label_map_max_side, 0, 1 << 16),
        }

    def prepare(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        """Decoded and resized (uint8) a chunk at a time (`Preprocessor.in_chunks`), then normalized by size."""
        parts, failed = self.preprocessor.in_chunks(images, self.resize_each)
        kept = [index for indices, _ in parts for index in indices]
        if not kept:
            return PreprocessResult(None, kept, failed)
        groups = normalized_groups([tensor for _, tensors in parts for tensor in tensors], self.normalize)
        return PreprocessResult(SegmentBatch(groups, [original_size(images[i]) for i in kept]), kept, failed)

    def resize_each(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        return segmenter_resize(images, self.settings.preprocess)

    def answer(self, batch: SegmentBatch, options: Sequence[dict]) -> list[Any]:
        label_maps: list[torch.Tensor | None] = [None] * len(batch.original)
        for slots, inputs in batch.groups:
            for start in range(0, len(slots), self.settings.artifact.max_batch):
                part = inputs[start:start + self.settings.artifact.max_batch]
                classes = class_map(first_tensor(self.run(part)))
                for offset, label_map in enumerate(classes):
                    label_maps[slots[start + offset]] = label_map
        return [self.describe(m, size, opts) for m, size, opts in zip(label_maps, batch.original, options)]

    def describe(self, label_map: torch.Tensor, original: tuple[int, int], options: dict) -> dict:
        height, width = original
        counts = torch.bincount(label_map.flatten()).tolist()
        share = 1.0 / label_map.numel()
        classes = [{"label": label_for(self.labels, index), "index": index, "pixels": round(count * share * height * width),
                    "fraction": round(count * share, FRACTION_DECIMALS)}
                   for index, count in enumerate(counts) if count]
        answer: dict[str, Any] = {"width": width, "height": height, "classes": sorted(classes, key=lambda c: -c["pixels"])}
        if options["label_map"]:
            size = fit_pixels(fit_within(original, options["label_map_max_side"]), self.settings.preprocess.max_pixels)
            answer["label_map"] = label_map_png(resize_label_map(label_map, size))
        return answer


def class_map(scores: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) scores -> (N, H, W) class of each pixel: `scores.argmax(1)`, the same classes (the first of
    equal scores), as uint8 where there are at most 256 classes on the CPU.

    argmax over the channel dimension strides across C whole planes for every pixel; one running
    comparison per class walks each plane once (measured 3x faster on a segmenter's 21 x 520x693
    scores per photo, where argmax cost a third of the model's own time on one thread). A NaN score
    (which argmax takes as the largest) leaves a NaN in the running maximum: that batch takes argmax."""
    classes = scores.shape[1]
    if scores.device.type != "cpu" or not 1 < classes <= 256 or not scores.is_floating_point():
        return scores.argmax(1)
    best = scores[:, 0].clone()
    index = torch.zeros(best.shape, dtype=torch.uint8)
    higher = torch.empty(best.shape, dtype=torch.bool)
    for klass in range(1, classes):
        torch.gt(scores[:, klass], best, out=higher)
        torch.maximum(best, scores[:, klass], out=best)
        index.masked_fill_(higher, klass)
    return scores.argmax(1) if bool(best.isnan().any()) else index


def label_map_png(label_map: torch.Tensor) -> dict:
    """{"format": "png", "width", "height", "data": base64}: 8-bit greyscale, 16-bit past 256 classes."""
    pixels = label_map.cpu().numpy()
    from PIL import Image

    narrow = pixels.max(initial=0) < 256
    image = Image.fromarray(pixels.astype(np.uint8 if narrow else np.uint16, copy=False))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return {"format": "png", "width": int(pixels.shape[1]), "height": int(pixels.shape[0]),
            "data": base64.b64encode(buffer.getvalue()).decode("ascii")}


def resize_groups(images: list[torch.Tensor], settings, normalize: Normalizer) -> list[tuple[list[int], torch.Tensor]]:
    """Decoded images as a segmenter takes them: shorter side -> `resize` (longer side at most `max_size`),
    normalized, grouped by resulting size. int8 calibration prepares its photos with this too."""
    return normalized_groups(segmenter_resize(images, settings), normalize)


def segmenter_resize(images: list[torch.Tensor], settings) -> list[torch.Tensor]:
    """uint8 (3, H, W) images -> uint8 (3, h, w), shorter side -> `resize` (longer side at most `max_size`),
    resized before any float copy is made; one call per slice of same-size images (`same_size_slices`)."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(images)
    for indices in same_size_slices(images):
        resized = F.resize(as_batch([images[i] for i in indices]), [settings.resize], max_size=settings.max_size or None,
                           interpolation=INTERPOLATION_MODES[settings.interpolation], antialias=settings.antialias)
        for slot, index in enumerate(indices):
            out[index] = resized[slot]
    return out


def normalized_groups(resized: list[torch.Tensor], normalize: Normalizer) -> list[tuple[list[int], torch.Tensor]]:
    """Resized uint8 images -> (their indices, one normalized contiguous batch: `Normalizer`'s) per resulting size."""
    return [(indices, normalize(as_batch([resized[i] for i in indices])))
            for indices in group_by_size(resized).values()]
