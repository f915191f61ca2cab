"""The TorchServe handler lifecycle every task shares: build the service once per worker, then answer batches.

Each handler module (`image_classifier.py`, `object_detector.py`, `image_segmenter.py`) defines one
subclass of this, because TorchServe loads the one class a handler module defines (a class imported
into it does not count). `ts` is imported only when TorchServe initializes the worker, so the rest
of the package stays importable without TorchServe.
"""

from __future__ import annotations

from typing import Any

from .worker.heap import freeze_startup_objects
from .request.json_body import hand_json_to_the_handler
from .worker.service import VisionService


class TorchServeHandler:
    """Loads the archive's artifact once per worker, then answers batches of image requests."""

    def __init__(self):
        self.service: VisionService | None = None
        self.initialized = False

    def initialize(self, context: Any) -> None:
        from ts.metrics.metric_type_enum import MetricTypes

        self.service = VisionService.from_context(context, gauge_type=MetricTypes.GAUGE)
        hand_json_to_the_handler()  # JSON bodies reach read_request as bytes, parsed there within bounds
        freeze_startup_objects()
        self.initialized = True

    def handle(self, data: Any, context: Any) -> list[Any]:
        return self.service.handle(data, context)
