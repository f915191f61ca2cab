"""Image classification: resize + center crop + normalize as one batch, then top-k {label: probability}."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..preprocess.decode import EncodedImage
from .answers import first_tensor, topk_answers
from ..preprocess import PreprocessResult
from .base import Task


class ClassifyTask(Task):
    name = "classify"

    def prepare(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        return self.preprocessor(images)

    def answer(self, batch: torch.Tensor, options: Sequence[dict]) -> list[Any]:
        return topk_answers(self.logits(batch), self.labels, self.settings.runtime.topk)

    def logits(self, batch: torch.Tensor) -> torch.Tensor:
        outputs = [first_tensor(self.run(part)) for part in torch.split(batch, self.settings.artifact.max_batch)]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)
