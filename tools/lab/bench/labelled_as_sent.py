"""Labelled photos as a phone would send them: each photo of `tsvk bench accuracy` upscaled to a phone camera's size
(12 MP by default) keeping its proportions, given seeded sensor noise and written as a phone's JPEG, made once and
cached.

The ImageNet photos are about 0.2 MP; the photos people send are 12-48 MP, which the handler decodes at a reduced DCT
scale (1/4 or 1/8) before resizing. Scoring both in one run says whether that path costs accuracy. The pixels and the
JPEG are made by sent_photos' own recipe (Lanczos upscale, shot + read noise, quality 90, baseline), so these copies
and the speed benchmark's photos are the same kind of file. No EXIF orientation is written: the copy is upright as the
original is, so the photo's size is the only difference between the two.

Each copy is named after its original and a digest of the original's bytes, and its noise is seeded from that digest
and the size: a rerun makes the same bytes, a changed original makes a new copy. The folder is named after this
recipe's version, sent_photos' pixel recipe's (RECIPE_VERSION) and the Pillow and NumPy that made it, as sent_photos'
own set is.
"""

from __future__ import annotations

import hashlib
import math
from io import BytesIO
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageOps

from ... import progress
from ...fsutil import atomic_path
from . import sent_photos

VERSION = 1  # raise when a copy's recipe here changes (sent_photos.RECIPE_VERSION names the recipe it borrows)
SIZES = tuple(name for name in sent_photos.SIZES if name.endswith("mp"))  # a phone camera's sizes: 12mp, 24mp, 48mp
DIGEST_CHARS = 12  # of the original's SHA-256, in the copy's name


def megapixels(size: str) -> float:
    """A size's pixels in millions, as sent_photos names them (12mp: 4032x3024, 12.2 MP)."""
    width, height = sent_photos.SIZES[size]
    return round(width * height / 1e6, 1)


def phone_shape(width: int, height: int, size: str) -> tuple[int, int]:
    """(width, height) with the photo's proportions and as many pixels as the phone size: a 4:3 photo at 12mp is
    4032x3024, a 3:2 one 4277x2851, a portrait one the same turned."""
    sensor_width, sensor_height = sent_photos.SIZES[size]
    scale = math.sqrt(sensor_width * sensor_height / (width * height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def cache_folder(cache_dir: Path, size: str) -> Path:
    """Where the copies of one size lie: a change of either recipe, Pillow or NumPy makes a new folder."""
    name = f"labelled-{size}-v{VERSION}.{sent_photos.RECIPE_VERSION}-pillow{PIL.__version__}-numpy{np.__version__}"
    return Path(cache_dir) / "photos" / name


def copy_path(original: Path, data: bytes, folder: Path) -> Path:
    """The copy's file: the original's name and a digest of its bytes."""
    return folder / f"{original.stem}-{hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]}.jpg"


def upscaled_jpeg(data: bytes, size: str, seed: int) -> bytes:
    """The photo in `data` turned upright (EXIF), as RGB, upscaled to `size` with its proportions, with sensor noise,
    as a phone's JPEG."""
    with Image.open(BytesIO(data)) as opened:
        upright = ImageOps.exif_transpose(opened).convert("RGB")
    pixels = sent_photos.phone_pixels(upright, phone_shape(*upright.size, size), seed)
    return sent_photos.encode_jpeg(pixels)


def upscaled_copy(original: Path, size: str, folder: Path) -> Path:
    """The original's copy at `size`, made now unless it is already in `folder`."""
    data = original.read_bytes()
    path = copy_path(original, data, folder)
    if not path.is_file():
        seed = sent_photos.seed_from(f"labelled-v{VERSION}:{size}:{path.name}")
        jpeg = upscaled_jpeg(data, size, seed)
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(jpeg)
    return path


def upscaled_copies(photos: list[tuple[Path, int]], size: str, cache_dir: Path) -> list[tuple[Path, int]]:
    """Each labelled photo's copy at `size`, with the same label, in the same order (made once, then read)."""
    folder = cache_folder(cache_dir, size)
    copies = []
    with progress.step(f"photos as sent ({size}, cached in {folder})") as step:
        for done, (original, label) in enumerate(photos):
            step.waiting_for(f"photo {done + 1} of {len(photos)}")
            copies.append((upscaled_copy(original, size, folder), label))
    return copies
