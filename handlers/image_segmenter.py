"""TorchServe handler: semantic segmentation (per-class areas and a label map PNG) with batched
GPU/CPU decoding, images of one size run together and each label map mapped back to its photo.

TorchServe needs exactly one class defined in this module; the lifecycle is `tsvk.handler`'s and
all the logic lives in the `tsvk` package packed next to this file in the archive (TorchServe puts
the archive root on sys.path).
"""

from tsvk.handler import TorchServeHandler


class ImageSegmenter(TorchServeHandler):
    """Loads the archive's segmentation model once per worker, then answers batches of image requests."""
