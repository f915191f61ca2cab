"""The OpenVINO model code a Triton or LitServe user writes around an IR: Pillow decode, resize, crop and
normalize in NumPy, OpenVINO's Python API for the model, top-5 in NumPy.

Standalone on purpose (NumPy, Pillow and openvino only, no torch, no tsvk): the Triton app imports it
from a venv of Debian's own Python that has nothing else (tools/lab/bench/systems/peers.py says why).
The IR is compiled as tsvk's worker compiles it (`INFERENCE_PRECISION_HINT` f32, see
handlers/tsvk/model/openvino_ir.py), so every row runs the same int8 graph at the same precision.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

TOPK = 5
CPU_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32"}


class OpenVinoClassifier:
    """Decode with Pillow, resize the shorter side, center crop, normalize, run the compiled IR, top-5."""

    def __init__(self, xml: Path, labels: Path, threads: int, resize: int, crop: int, mean, std, draft: bool = False):
        import openvino as ov

        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(xml)), "CPU", {**CPU_PROPERTIES, "INFERENCE_NUM_THREADS": threads})
        self.output = self.compiled.output(0)
        self.labels = json.loads(Path(labels).read_text())
        self.resize, self.crop = resize, crop
        self.mean = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)
        self.draft = draft

    def tensor(self, jpeg: bytes) -> np.ndarray:
        """One photo as the model's (3, crop, crop) float32 input."""
        from PIL import Image

        with Image.open(io.BytesIO(jpeg)) as image:
            image = self.hand_written(image) if self.draft else image.convert("RGB")
            width, height = image.size
            scale = self.resize / min(width, height)
            image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.BILINEAR)
            left, top = (image.width - self.crop) // 2, (image.height - self.crop) // 2
            image = image.crop((left, top, left + self.crop, top + self.crop))
        pixels = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return (pixels - self.mean) / self.std

    def hand_written(self, image):
        """What a user writes for phone photos: a JPEG decoded at the smallest DCT scale (1/2, 1/4, 1/8) that still
        leaves both sides >= `resize` (Pillow's draft), then turned upright as its EXIF orientation says."""
        from PIL import ImageOps

        image.draft("RGB", (self.resize, self.resize))  # JPEG only; other formats decode whole
        return ImageOps.exif_transpose(image).convert("RGB")

    def logits(self, batch: np.ndarray) -> np.ndarray:
        return self.compiled(np.ascontiguousarray(batch, dtype=np.float32))[self.output]

    def top(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The top-k softmax probabilities of each row, highest first, and their class indices."""
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        indices = np.argsort(-probabilities, axis=1)[:, :TOPK]
        return np.take_along_axis(probabilities, indices, axis=1), indices

    def answers(self, logits: np.ndarray) -> list[dict[str, float]]:
        """The {label: probability} shape TorchServe's image_classifier returns."""
        values, indices = self.top(logits)
        return [{self.labels[i]: float(p) for i, p in zip(row_i, row_p)} for row_i, row_p in zip(indices, values)]


def add_model_arguments(parser) -> None:
    """The command-line options both apps take to build an OpenVinoClassifier."""
    parser.add_argument("--xml", type=Path, required=True, help="the OpenVINO IR (.xml, .bin beside it)")
    parser.add_argument("--labels", type=Path, required=True, help="JSON list of class names")
    parser.add_argument("--threads", type=int, required=True, help="OpenVINO inference threads per model instance")
    parser.add_argument("--resize", type=int, required=True)
    parser.add_argument("--crop", type=int, required=True)
    parser.add_argument("--mean", type=float, nargs=3, required=True)
    parser.add_argument("--std", type=float, nargs=3, required=True)
    parser.add_argument("--draft", action="store_true", help="decode JPEGs at a reduced DCT scale and apply the EXIF orientation")


def classifier_from_args(args) -> OpenVinoClassifier:
    return OpenVinoClassifier(args.xml, args.labels, args.threads, args.resize, args.crop, args.mean, args.std, args.draft)
