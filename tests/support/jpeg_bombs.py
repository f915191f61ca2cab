"""Hostile JPEGs built in-process: a progressive JPEG whose one small AC scan is repeated.

Each repeat is a valid scan of the same coefficients (decoders warn of an inconsistent progression
and go on), so the file decodes to the same picture while costing blocks x scans: a 4000x4000 one
with 2,000 repeats is about 200 KB and took 6-9 s to decode on a 2-vCPU AMD EPYC (docs/robustness.md).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

SOS = 0xDA
EOI = 0xD9


def gradient_jpeg(width: int, height: int, progressive: bool = True) -> bytes:
    """A smooth colour gradient: high-frequency AC scans of it are a few bytes each."""
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 255 // max(width + height - 2, 1)], -1)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, "JPEG", quality=75, progressive=progressive)
    return buffer.getvalue()


def scans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each SOS segment with its entropy-coded data, found by a plain byte-by-byte walk."""
    found, position = [], 2
    while position < len(data) and data[position + 1] != EOI:
        end = position + 2 + int.from_bytes(data[position + 2:position + 4], "big")
        if data[position + 1] == SOS:
            while not (data[end] == 0xFF and data[end + 1] not in (0x00, 0xFF, *range(0xD0, 0xD8))):
                end += 1
            found.append((position, end))
        position = end
    return found


def scan_bomb(width: int = 2000, height: int = 2000, repeats: int = 300) -> bytes:
    """A progressive JPEG with its smallest luma AC scan repeated `repeats` more times."""
    data = gradient_jpeg(width, height)
    luma_ac = [
        (end - start, start, end) for start, end in scans(data) if data[start + 5] == 1 and data[start + 6 + 2 * data[start + 4] - 1] > 0
    ]
    _, start, end = min(luma_ac)
    return data[:end] + data[start:end] * repeats + data[end:]
