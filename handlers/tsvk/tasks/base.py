"""What every task shares: the loaded model, the decoding backend, the labels, and the three steps a
batch goes through (read each request's options, prepare the batch, answer each image).

A request's life is the same for every task; only the transform (`prepare`) and the answer
(`answer`) differ. Decoding, errors, metrics, threads and loading stay in the service and the package.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Sequence

import torch

from ..preprocess.decode import EncodedImage
from .loaded_model import LoadedModel
from ..preprocess import PreprocessResult, Preprocessor
from ..common.settings import HandlerSettings


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

    def answer_within(self, batch: Any, options: Sequence[dict], until_s: float | None) -> list[Any]:
        """The answers of the first images that time allows, in order (`until_s`: a `time.perf_counter()`
        instant, None: no limit). A task that computes a batch in parts stops before a part that would end
        after it; the rest of the batch is refused by the service. By default a batch is one part."""
        return self.answer(batch, options)

    def chunks(self, items: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """Slices no larger than the artifact was built for."""
        size = self.settings.artifact.max_batch
        for start in range(0, len(items), size):
            yield items[start:start + size]

    def run(self, inputs: Any) -> Any:
        with torch.inference_mode():
            return self.model.forward(inputs)


class PartPace:
    """Whether a batch computed in parts has time for its next part: the seconds per image of the parts
    so far, times the next part's images, must end by `until_s`. The first part always runs, so a batch
    answers at least one image however slow the worker is."""

    def __init__(self, until_s: float | None):
        self.until_s = until_s
        self.images = 0
        self.seconds = 0.0

    def allows(self, images: int) -> bool:
        if self.until_s is None or self.images == 0:
            return True
        return time.perf_counter() + self.seconds / self.images * images <= self.until_s

    def record(self, images: int, started: float) -> None:
        self.images += images
        self.seconds += time.perf_counter() - started
