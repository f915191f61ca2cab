"""What every task shares: the loaded model, the decoding backend, the labels, and the three steps a
batch goes through (read each request's options, prepare the batch, answer each image).

A request's life is the same for every task; only the transform (`prepare`) and the answer
(`answer`) differ. Decoding, errors, metrics, threads and loading stay in the service and the package.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch

from ..decode import EncodedImage
from ..loaded_model import LoadedModel
from ..preprocess import PreprocessResult, Preprocessor
from ..settings import HandlerSettings


class Task:
    """Subclasses set `name` and `parameters` and implement `prepare` and `answer`."""

    name = ""
    parameters: tuple[str, ...] = ()  # options a request may set (form or JSON fields, tasks/params.py); never taken for the image

    def __init__(self, settings: HandlerSettings, model: LoadedModel, preprocessor: Preprocessor, labels: list[str] | None):
        self.settings = settings
        self.model = model
        self.preprocessor = preprocessor
        self.labels = labels

    @staticmethod
    def served_form(model: Any) -> Any:
        """The eager model as it is served and compiled: as built, in eval mode."""
        return model.eval()

    @staticmethod
    def on_cpu(model: Any) -> Any:
        """The eager served model as it runs on a CPU worker: as it is, unless a task speeds it up there."""
        return model

    def options(self, request: Any) -> dict:
        """This request's answer options (form or JSON fields); BadRequest when one is unusable."""
        return {}

    def prepare(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        """The model's input for the images that decode; `kept` and `failed` by input index."""
        raise NotImplementedError

    def answer(self, batch: Any, options: Sequence[dict]) -> list[Any]:
        """One answer per kept image, in order, each shaped by its request's options."""
        raise NotImplementedError

    def chunks(self, items: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """Slices no larger than the artifact was built for."""
        size = self.settings.artifact.max_batch
        for start in range(0, len(items), size):
            yield items[start:start + size]

    def run(self, inputs: Any) -> Any:
        with torch.inference_mode():
            return self.model.forward(inputs)
