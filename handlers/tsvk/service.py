"""The image classifier a TorchServe worker runs, without TorchServe: load once, then answer batches.

`ClassifierService.from_context` takes anything shaped like `ts.context.Context` (system_properties,
model_yaml_config, metrics, set_response_status), so tests drive it with a small fake and the
handler module stays a few lines. Every request of a batch gets exactly one answer: top-k
probabilities, or an error body with its own HTTP status; nothing a client sends can kill the worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from . import features
from .decode import EncodedImage, probe
from .errors import BadRequest, InferenceFailed, RequestError
from .inputs import request_payload
from .labels import load_labels
from .loading import LoadedModel, bind_worker_device, load_model, worker_device
from .metrics import BatchMetrics
from .postprocess import first_tensor, topk_answers
from .preprocess import BackendChoice, Preprocessor, build_preprocessor
from .settings import HandlerSettings
from .threads import apply_threads, resolve_threads

log = logging.getLogger(__name__)

PHRASES = {400: "Bad Request", 413: "Payload Too Large", 500: "Internal Server Error"}


@dataclass
class BatchOutcome:
    """One answer per request, and the HTTP status of each."""

    answers: list[Any]
    statuses: list[int]


class ClassifierService:
    def __init__(
        self,
        settings: HandlerSettings,
        model: LoadedModel,
        preprocessor: Preprocessor,
        labels: list[str] | None,
        metrics: BatchMetrics | None = None,
    ):
        self.settings = settings
        self.model = model
        self.preprocessor = preprocessor
        self.labels = labels
        self.metrics = metrics

    @classmethod
    def from_context(cls, context: Any, gauge_type: Any = None) -> "ClassifierService":
        """Read the settings, set threads, load the model and pick the preprocessing backend."""
        settings = HandlerSettings.from_model_yaml(context.model_yaml_config)
        properties = context.system_properties
        model_dir = Path(properties.get("model_dir") or ".")
        model_name = getattr(context, "model_name", None) or settings.model_name
        worker = worker_device(properties.get("gpu_id"))
        bind_worker_device(worker)  # before any CUDA work: libraries allocate on the current device
        plan = resolve_threads(settings.runtime, model_name)
        apply_threads(plan)  # before loading: some loaders start thread pools
        labels = load_labels(model_dir / settings.labels_file)
        model = load_model(settings.artifact, model_dir, worker, num_classes=len(labels) if labels else None)
        preprocessor, choice = build_preprocessor(settings.preprocess, model.device, model.input_dtype)
        _log_loaded(settings, model, choice, properties.get("batch_size"), plan.source)
        metrics = BatchMetrics(getattr(context, "metrics", None), choice.name, model_name, gauge_type)
        return cls(settings, model, preprocessor, labels, metrics)

    def handle(self, data: Sequence[Any], context: Any = None) -> list[Any]:
        """TorchServe's entry point: answers in request order, statuses set on the context."""
        outcome = self.answer(data)
        if context is not None:
            report_statuses(context, outcome.statuses)
        return outcome.answers

    def answer(self, data: Sequence[Any]) -> BatchOutcome:
        answers: list[Any] = [None] * len(data)
        errors: dict[int, RequestError] = {}
        encoded = self._read_requests(data, errors)
        started = time.perf_counter()
        positions, batch = self._preprocess(encoded, errors)
        preprocessed = time.perf_counter()
        for position, answer in zip(positions, self._infer(batch, positions, errors)):
            answers[position] = answer
        finished = time.perf_counter()
        for position, error in errors.items():
            answers[position] = error.body()
        statuses = [errors[i].status if i in errors else 200 for i in range(len(data))]
        if self.metrics is not None:
            self.metrics.record(len(data), len(positions), (preprocessed - started) * 1e3, (finished - preprocessed) * 1e3, statuses)
        return BatchOutcome(answers, statuses)

    def _read_requests(self, data: Sequence[Any], errors: dict[int, RequestError]) -> dict[int, EncodedImage]:
        encoded: dict[int, EncodedImage] = {}
        for position, request in enumerate(data):
            try:
                encoded[position] = probe(request_payload(request), self.settings.preprocess.max_pixels)
            except RequestError as err:
                errors[position] = err
            except Exception as err:  # noqa: BLE001 - whatever the request holds, fail it alone
                errors[position] = BadRequest(f"cannot read the request: {type(err).__name__}: {err}")
        return encoded

    def _preprocess(self, encoded: dict[int, EncodedImage], errors: dict[int, RequestError]) -> tuple[list[int], torch.Tensor | None]:
        """Input positions that made it into the batch, and the batch."""
        if not encoded:
            return [], None
        order = sorted(encoded)
        try:
            result = self.preprocessor([encoded[p] for p in order])
        except Exception as err:  # noqa: BLE001 - a backend failure fails this batch only
            log.exception("preprocessing failed for a batch of %d", len(order))
            errors.update({p: InferenceFailed(f"preprocessing failed: {type(err).__name__}: {err}") for p in order})
            return [], None
        errors.update({order[i]: error for i, error in result.failed.items()})
        return [order[i] for i in result.kept], result.batch

    def _infer(self, batch: torch.Tensor | None, positions: list[int], errors: dict[int, RequestError]) -> list[Any]:
        if batch is None or not positions:
            return []
        try:
            logits = self.predict(batch)
            return topk_answers(logits, self.labels, self.settings.runtime.topk)
        except Exception as err:  # noqa: BLE001 - the model failing fails this batch, not the worker
            log.exception("inference failed for a batch of %d", len(positions))
            errors.update({p: InferenceFailed(f"inference failed: {type(err).__name__}: {err}") for p in positions})
            return []

    def predict(self, batch: torch.Tensor) -> torch.Tensor:
        """Logits for the batch, run in chunks no larger than the artifact was built for."""
        chunk = self.settings.artifact.max_batch
        with torch.inference_mode():
            outputs = [first_tensor(self.model.forward(part)) for part in torch.split(batch, chunk)]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)


def _log_loaded(settings: HandlerSettings, model: LoadedModel, choice: BackendChoice, batch_size: Any, threads_from: str) -> None:
    """The one line an operator reads to know what this worker runs, and on what."""
    log.info(
        "tsvk loaded %s: artifact format=%s file=%s device=%s precision=%s preprocess=%s (%s) "
        "batch_size=%s threads=intra %d, inter %d (%s)%s; features %s",
        settings.model_name, settings.artifact.format, settings.artifact.file, model.device,
        settings.artifact.precision, choice.name, choice.reason, batch_size,
        torch.get_num_threads(), torch.get_num_interop_threads(), threads_from,
        f"; {model.note}" if model.note else "", features.describe(("cuda", "nvjpeg", "cvcuda"), model.device),
    )


def report_statuses(context: Any, statuses: list[int]) -> None:
    """Per-request HTTP status: TorchServe 0.12 sends the code set for each index with that response."""
    for index, status in enumerate(statuses):
        if status != 200:
            context.set_response_status(status, PHRASES.get(status, "Error"), index)
