"""TorchServe handler: semantic segmentation (per-class areas and a label map PNG) with batched
GPU/CPU decoding, images of one size run together and each label map mapped back to its photo.

TorchServe needs exactly one class defined in this module; all the logic lives in the `tsvk`
package packed next to this file in the archive (TorchServe puts the archive root on sys.path).
"""

from tsvk.service import VisionService


class ImageSegmenter:
    """Loads the archive's segmentation model once per worker, then answers batches of image requests."""

    def __init__(self):
        self.service = None
        self.initialized = False

    def initialize(self, context):
        from ts.metrics.metric_type_enum import MetricTypes

        self.service = VisionService.from_context(context, gauge_type=MetricTypes.GAUGE)
        self.initialized = True

    def handle(self, data, context):
        return self.service.handle(data, context)
