"""Real photographs for demos, tests and benchmarks: scikit-image ships a few, no download needed."""

from __future__ import annotations

import io
from pathlib import Path

from .errors import UsageError

SKIMAGE_PHOTOS = ("chelsea", "coffee", "astronaut")


def photo_array(name: str):
    """An RGB uint8 array of one of scikit-image's bundled photographs."""
    if name not in SKIMAGE_PHOTOS:
        raise UsageError(f"skimage photo must be one of {', '.join(SKIMAGE_PHOTOS)}, got {name!r}")
    try:
        from skimage import data
    except ImportError as err:
        raise UsageError("scikit-image is needed for skimage:<name> images: pip install scikit-image") from err
    return getattr(data, name)()


def jpeg_bytes(array, size: tuple[int, int] | None = None, quality: int = 90) -> bytes:
    """Encode an RGB array as JPEG, optionally resized to (width, height) first."""
    from PIL import Image

    image = Image.fromarray(array)
    if size is not None:
        image = image.resize(size, Image.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def image_bytes(spec: str, size: tuple[int, int] | None = None) -> bytes:
    """`skimage:<name>` as JPEG bytes (resized to (width, height) when given), or the bytes of an image file."""
    if spec.startswith("skimage:"):
        return jpeg_bytes(photo_array(image_name(spec)), size=size)
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--image {spec} is neither a file nor skimage:<{'|'.join(SKIMAGE_PHOTOS)}>")
    return path.read_bytes()


def image_name(spec: str) -> str:
    """The photo's name: `chelsea` for skimage:chelsea, the file's stem for a file."""
    return spec.split(":", 1)[1] if spec.startswith("skimage:") else Path(spec).stem
