"""TorchServe handler: object detection (boxes, and instance masks for Mask R-CNN) with batched
GPU/CPU decoding, each image's scale kept and its boxes mapped back to the original photo.

TorchServe needs exactly one class defined in this module; the lifecycle is `tsvk.handler`'s and
all the logic lives in the `tsvk` package packed next to this file in the archive (TorchServe puts
the archive root on sys.path).
"""

from tsvk.handler import TorchServeHandler


class ObjectDetector(TorchServeHandler):
    """Loads the archive's detector once per worker, then answers batches of image requests."""
