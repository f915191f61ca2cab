"""Inputs a batch run meets in practice, written to a folder: real photographs, and the bad ones that must
become error rows (corrupt, truncated, a decompression bomb's header, a scan bomb, not an image at all).
`BAD` says the code each bad one gets, as a served request would."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from tests.support.handler_fakes import encode, photo
from tests.support.jpeg_bombs import scan_bomb

GOOD = ("chelsea", "coffee", "astronaut")
BAD = {  # file name -> the error code its row carries
    "corrupt.jpg": "bad_image",
    "truncated.jpg": "bad_image",
    "pixel_bomb.png": "image_too_large",
    "scan_bomb.jpg": "decode_too_costly",
    "not_an_image.gif": "bad_image",
}


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height and whose data is one empty chunk: a bomb's promise."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def bad_bytes() -> dict[str, bytes]:
    jpeg = encode(photo("chelsea"))
    return {
        "corrupt.jpg": b"\xff\xd8\xff" + bytes(range(256)) * 4,
        "truncated.jpg": jpeg[: len(jpeg) // 3],
        "pixel_bomb.png": png_header_only(60000, 60000),
        "scan_bomb.jpg": scan_bomb(),
        "not_an_image.gif": b"GIF89a this is not a picture",
    }


def write_inputs(folder: Path, good_format: str = "JPEG") -> dict[str, bytes]:
    """The good photos (`<name>.jpg`, or .png for PNG) and the bad inputs in `folder`; name -> bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".png" if good_format == "PNG" else ".jpg"
    files = {f"{name}{suffix}": encode(photo(name), good_format) for name in GOOD} | bad_bytes()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files
