"""TorchServe handler: image classification with batched GPU/CPU preprocessing.

TorchServe needs exactly one class defined in this module; the lifecycle is `tsvk.handler`'s and
all the logic lives in the `tsvk` package packed next to this file in the archive (TorchServe puts
the archive root on sys.path).
"""

from tsvk.handler import TorchServeHandler


class ImageClassifier(TorchServeHandler):
    """Loads the archive's classifier once per worker, then answers batches of image requests."""
