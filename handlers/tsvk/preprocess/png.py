"""8-bit RGB and RGBA PNGs (photos saved as PNG, screenshots) decoded by libspng through pyspng: about half the CPU of
Pillow's PNG decoder, pixel for pixel the same (a 4K photo PNG 178 -> 94 ms on one thread of a 2-vCPU AMD EPYC, where
Pillow unfilters each row in plain C; docs/handler.md).

pyspng 0.1.4 has libspng use a chunk whose CRC does not match (its main.cpp sets `spng_set_crc_action(SPNG_CRC_USE,
SPNG_CRC_USE)`), so a corrupted upload would decode to wrong pixels instead of failing. `spng_decodes` therefore walks
the chunks first, checking each one's CRC (about 2 ms for a 6 MB file), and leaves to Pillow every file where libspng
would answer otherwise than Pillow does: a CRC that does not match or a file cut short (Pillow then names the damage),
another bit depth or colour type (16-bit, grey, palette: Pillow's conversions to RGB differ), an animation (acTL: the
first frame is Pillow's business) or an EXIF orientation (eXIf, which Pillow turns the image by).
"""

from __future__ import annotations

import zlib

import numpy as np

from ..common import features

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TRUECOLOUR = (2, 6)  # IHDR colour types whose 8-bit pixels libspng gives as Pillow's RGB does: RGB, RGBA (alpha dropped)
_LEFT_TO_PILLOW = (b"acTL", b"eXIf")  # chunks whose meaning libspng's decode does not apply
_LENGTH, _TYPE, _CRC = 4, 4, 4
_MAX_CHUNKS = 1_000_000  # a walk stops here (a 6 MB photo has about a hundred)


def spng_decodes(data: bytes | bytearray | memoryview) -> bool:
    """Whether pyspng is here and decodes this PNG to the pixels Pillow would: an 8-bit RGB or RGBA image, every chunk's
    CRC right up to IEND, no animation, no EXIF orientation."""
    if features.png_decoder() is None or len(data) < 33 or bytes(data[:8]) != SIGNATURE or bytes(data[12:16]) != b"IHDR":
        return False
    depth, colour = data[24], data[25]
    return depth == 8 and colour in _TRUECOLOUR and _chunks_intact(memoryview(data))


def decode_rgb(data: bytes | bytearray | memoryview) -> np.ndarray:
    """HWC uint8 RGB of a PNG `spng_decodes` took; RuntimeError where libspng finds the data broken."""
    return features.png_decoder().load(data if type(data) is bytes else bytes(data), "RGB")


def _chunks_intact(view: memoryview) -> bool:
    """Every chunk from IHDR to IEND whole, its CRC right, none of them one libspng would not apply."""
    position = len(SIGNATURE)
    for _ in range(_MAX_CHUNKS):
        header_end = position + _LENGTH + _TYPE
        if header_end > len(view):
            return False
        kind = bytes(view[position + _LENGTH:header_end])
        end = header_end + int.from_bytes(view[position:position + _LENGTH], "big")
        if end + _CRC > len(view) or kind in _LEFT_TO_PILLOW:
            return False
        if zlib.crc32(view[position + _LENGTH:end]) != int.from_bytes(view[end:end + _CRC], "big"):
            return False
        if kind == b"IEND":
            return True
        position = end + _CRC
    return False
