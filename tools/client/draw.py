"""`tsvk draw`: what a served detector or segmenter answered, drawn over the photo it was sent.

The photo is sent to the running TorchServe exactly as `tsvk predict` sends it; the answer's boxes
(and Mask R-CNN's RLE masks), or its label map, are drawn in the photo's own pixels, EXIF orientation
applied, so the picture shows the geometry the service returns. Written as a PNG, atomically.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import TYPE_CHECKING

from .. import defaults
from ..errors import UsageError
from ..fsutil import atomic_path
from .predict import ask

if TYPE_CHECKING:
    from PIL import Image

COLOURS = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
           (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (220, 190, 255))
MASK_ALPHA = 0.45


def colour(index: int) -> tuple[int, int, int]:
    return COLOURS[index % len(COLOURS)]


def draw_answer(photo_bytes: bytes, answer) -> "Image.Image":
    """The photo with the answer drawn on it: boxes (and masks) for a detector, the label map for a segmenter."""
    from PIL import Image, ImageOps

    photo = ImageOps.exif_transpose(Image.open(io.BytesIO(photo_bytes))).convert("RGB")
    if isinstance(answer, list):
        return draw_detections(photo, answer)
    if isinstance(answer, dict) and "label_map" in answer:
        return draw_label_map(photo, answer)
    raise UsageError("the answer holds neither boxes nor a label map (a classifier's top-k?): `tsvk draw` takes a "
                     "detection or segmentation model")


def draw_detections(photo, detections: list[dict]):
    from PIL import Image, ImageDraw

    from tsvk.tasks import decode_mask  # torch: only answers with masks need it

    canvas = photo.copy()
    labels = sorted({d["label"] for d in detections})
    for detection in detections:
        if "mask" in detection:
            mask = Image.fromarray(decode_mask(detection["mask"]).numpy().astype("uint8") * int(255 * MASK_ALPHA))
            mask = mask.resize(canvas.size, Image.NEAREST)  # a mask on a reduced grid (it says `photo_size`)
            canvas.paste(Image.new("RGB", canvas.size, colour(labels.index(detection["label"]))), (0, 0), mask)
    pen = ImageDraw.Draw(canvas)
    for detection in detections:
        tint = colour(labels.index(detection["label"]))
        pen.rectangle(detection["box"], outline=tint, width=2)
        x1, y1 = detection["box"][:2]
        pen.text((x1 + 3, y1 + 2), f"{detection['label']} {detection['score']:.2f}", fill=tint)
    return canvas


def draw_label_map(photo, answer: dict):
    import numpy as np
    from PIL import Image, ImageDraw

    label_map = np.array(Image.open(io.BytesIO(base64.b64decode(answer["label_map"]["data"]))))
    label_map = np.array(Image.fromarray(label_map).resize(photo.size, Image.NEAREST))
    tints = np.array([colour(i) for i in range(int(label_map.max()) + 1)], dtype=np.float32)
    blended = np.asarray(photo, dtype=np.float32) * (1 - MASK_ALPHA) + tints[label_map] * MASK_ALPHA
    canvas = Image.fromarray(blended.round().astype(np.uint8))
    pen = ImageDraw.Draw(canvas)
    for row, entry in enumerate(answer["classes"][:8]):
        pen.rectangle([6, 6 + 14 * row, 16, 16 + 14 * row], fill=colour(entry["index"]))
        pen.text((20, 5 + 14 * row), f"{entry['label']} {entry['fraction']:.1%}", fill=(255, 255, 255))
    return canvas


def draw(run_dir: Path, image: str, model: str | None, output: Path) -> Path:
    body, answer = ask(run_dir, image, model)
    picture = draw_answer(body, answer)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(output, force=True) as tmp:
        picture.save(tmp, format="PNG")
    return output


def register(commands) -> None:
    p = commands.add_parser("draw", help="draw a served detector's boxes or a segmenter's label map over the photo sent")
    p.add_argument("--image", default=defaults.IMAGE, help="an image file, or skimage:<name> (chelsea, coffee, astronaut)")
    p.add_argument("--model", help="model name (default: the first in the running config)")
    p.add_argument("--output", type=Path, default=Path(defaults.DRAW_OUTPUT), help=f"the PNG to write (default {defaults.DRAW_OUTPUT})")
    p.add_argument("--run-dir", type=Path, default=Path(defaults.RUN_DIR))
    p.set_defaults(func=cmd_draw)


def cmd_draw(args) -> int:
    path = draw(args.run_dir, args.image, args.model, args.output)
    print(f"wrote {path}")
    return 0
