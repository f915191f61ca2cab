"""TorchServe's image_classifier with the decoding a user writes by hand for phone photos: a JPEG decoded by
Pillow at the smallest DCT scale (1/2, 1/4, 1/8) that still leaves both sides >= the resize (`Image.draft`), then
turned upright as its EXIF orientation says (`ImageOps.exif_transpose`); the rest is the built-in handler's.

A custom handler file as TorchServe documents them (`--handler <file>.py`, one class), packed into the
torchserve_draft row's archive; it runs inside TorchServe's worker, so it imports `ts`.
"""

import base64
import io

import torch
from PIL import Image, ImageOps
from ts.torch_handler.image_classifier import ImageClassifier

RESIZE = 256  # the built-in image_classifier's Resize(256)


class DraftImageClassifier(ImageClassifier):
    def preprocess(self, data):
        """As the built-in VisionHandler.preprocess, with each photo opened by `open_photo`."""
        images = []
        for row in data:
            image = row.get("data") or row.get("body")
            if isinstance(image, str):
                image = base64.b64decode(image)
            images.append(self.image_processing(open_photo(bytes(image))))
        return torch.stack(images).to(self.device)


def open_photo(data: bytes) -> Image.Image:
    """The photo upright, a JPEG decoded at a reduced DCT scale."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (RESIZE, RESIZE))  # JPEG only; other formats decode whole
        return ImageOps.exif_transpose(image).convert("RGB")
