"""TorchServe handler: image classification with batched GPU/CPU preprocessing.

TorchServe needs exactly one class defined in this module; all the logic lives in the `tsvk`
package packed next to this file in the archive (TorchServe puts the archive root on sys.path).
"""

from tsvk.service import VisionService


class ImageClassifier:
    """Loads the archive's artifact once per worker, then answers batches of image requests."""

    def __init__(self):
        self.service = None
        self.initialized = False

    def initialize(self, context):
        from ts.metrics.metric_type_enum import MetricTypes

        self.service = VisionService.from_context(context, gauge_type=MetricTypes.GAUGE)
        self.initialized = True

    def handle(self, data, context):
        return self.service.handle(data, context)
