"""The handler's custom metrics: names in one place, for the code, the metrics yaml and Grafana.

Recorded per batch through TorchServe's metrics cache (`context.metrics`). With
`metrics_mode=prometheus` they appear on /metrics as e.g.
`TsvkPreprocessMs{ModelName="resnet18",Level="Model",Backend="cpu",Hostname="..."}`.
TorchServe's frontend pairs dimension values with the names declared in the metrics yaml by
position, and its cache appends ModelName/Level after ours when they are missing; so every metric
here passes all its dimensions explicitly, in the declared order.
Nothing here imports TorchServe: the metric type enum is passed in by the handler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PREPROCESS_MS = "TsvkPreprocessMs"  # gauge, ms: read headers + decode + resize + crop + normalize of one batch
INFERENCE_MS = "TsvkInferenceMs"  # gauge, ms: the model's forward pass (and top-k) for one batch
BATCH_SIZE = "TsvkBatchSize"  # gauge, count: requests TorchServe put in the batch
IMAGES_TOTAL = "TsvkImagesTotal"  # counter, count: images preprocessed, by backend
REJECTED_TOTAL = "TsvkRejectedTotal"  # counter, count: requests answered with an error, by status
WORKER_STARTS = "TsvkWorkerStarts"  # gauge, count: workers started for the model; above the workers: restarts

BACKEND_DIMENSION = "Backend"
STATUS_DIMENSION = "Status"
DEFAULT_DIMENSIONS = ("ModelName", "Level")  # TorchServe's usual model-metric dimensions
MODEL_LEVEL = "Model"


@dataclass(frozen=True)
class _Dimension:
    """Duck-types ts.metrics.dimension.Dimension (name, value) without importing TorchServe."""

    name: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}:{self.value}"


def metric_definitions() -> dict[str, dict[str, Any]]:
    """name -> type, unit and dimensions, as TorchServe's metrics yaml (model_metrics) declares them."""
    dims = list(DEFAULT_DIMENSIONS)
    return {
        PREPROCESS_MS: {"type": "gauge", "unit": "ms", "dimensions": dims + [BACKEND_DIMENSION]},
        INFERENCE_MS: {"type": "gauge", "unit": "ms", "dimensions": dims + [BACKEND_DIMENSION]},
        BATCH_SIZE: {"type": "gauge", "unit": "count", "dimensions": dims + [BACKEND_DIMENSION]},
        IMAGES_TOTAL: {"type": "counter", "unit": "count", "dimensions": dims + [BACKEND_DIMENSION]},
        REJECTED_TOTAL: {"type": "counter", "unit": "count", "dimensions": dims + [STATUS_DIMENSION]},
        WORKER_STARTS: {"type": "gauge", "unit": "count", "dimensions": dims + [BACKEND_DIMENSION]},
    }


class BatchMetrics:
    """Writes the per-batch metrics; a metrics failure is logged once and never fails a request."""

    def __init__(self, metrics: Any, backend: str, model_name: str, gauge_type: Any = None, worker_starts: int = 0):
        self.metrics = metrics
        self.backend = backend
        self.model_name = model_name
        self.gauge_type = gauge_type
        self.worker_starts = worker_starts
        self._warned = False

    def record(self, batch_size: int, images: int, preprocess_ms: float, inference_ms: float, statuses: list[int]) -> None:
        if self.metrics is None:
            return
        try:
            self._record(batch_size, images, preprocess_ms, inference_ms, statuses)
        except Exception as err:  # noqa: BLE001 - metrics are not worth a failed request
            if not self._warned:
                log.warning("could not record tsvk metrics: %s", err)
                self._warned = True

    def _record(self, batch_size: int, images: int, preprocess_ms: float, inference_ms: float, statuses: list[int]) -> None:
        backend = self._dimensions(BACKEND_DIMENSION, self.backend)
        self.metrics.add_time(PREPROCESS_MS, round(preprocess_ms, 3), None, "ms", list(backend))
        self.metrics.add_time(INFERENCE_MS, round(inference_ms, 3), None, "ms", list(backend))
        gauge = {"metric_type": self.gauge_type} if self.gauge_type is not None else {}
        self.metrics.add_metric(BATCH_SIZE, batch_size, "count", None, list(backend), **gauge)
        if self.worker_starts:
            self.metrics.add_metric(WORKER_STARTS, self.worker_starts, "count", None, list(backend), **gauge)
        if images:
            self.metrics.add_counter(IMAGES_TOTAL, images, None, list(backend))
        for status in sorted(set(s for s in statuses if s != 200)):
            count = sum(1 for s in statuses if s == status)
            self.metrics.add_counter(REJECTED_TOTAL, count, None, self._dimensions(STATUS_DIMENSION, str(status)))

    def _dimensions(self, name: str, value: str) -> list[_Dimension]:
        """ModelName, Level, then ours: the order metric_definitions() declares."""
        return [_Dimension("ModelName", self.model_name), _Dimension("Level", MODEL_LEVEL), _Dimension(name, value)]
