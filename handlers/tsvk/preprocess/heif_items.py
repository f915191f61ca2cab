"""The image sizes a HEIF file (HEIC, AVIF) declares, read from its box structure before any decoder opens it.

The size a HEIF reader reports is the primary image's after its transformations, and a clean-aperture crop (`clap`)
may cut that to a few pixels of a far larger coded image: libheif decodes the whole coded image (the `ispe`
property, which it checks the decoded planes against) before cropping. So the probe bounds the largest `ispe` the file
declares, over every item (a grid's tiles, the grid itself, alpha and depth planes). The walk reads only the `meta`
box's properties: ftyp -> meta -> iprp -> ipco -> ispe (ISO/IEC 14496-12 boxes, ISO/IEC 23008-12 properties).
"""

from __future__ import annotations

from typing import Iterator

_HEADER = 8
_FULL_BOX = 4  # version and flags, before a full box's fields
_MAX_BOXES = 10_000  # a file with more boxes at one level is not walked further (a crafted one could have millions)


def declared_sizes(data: bytes) -> list[tuple[int, int]]:
    """(width, height) of every `ispe` property in the file's meta box; [] where there is none or no meta box."""
    meta = _child(data, 0, len(data), b"meta")
    iprp = _child(data, meta[0] + _FULL_BOX, meta[1], b"iprp") if meta else None
    ipco = _child(data, *iprp, b"ipco") if iprp else None
    if ipco is None:
        return []
    sizes = []
    for kind, start, end in _boxes(data, *ipco):
        if kind == b"ispe" and end - start >= _FULL_BOX + 8:
            fields = start + _FULL_BOX
            sizes.append((int.from_bytes(data[fields:fields + 4], "big"), int.from_bytes(data[fields + 4:fields + 8], "big")))
    return sizes


def _child(data: bytes, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    """(start, end) of the payload of the first box of `kind` between start and end."""
    return next(((s, e) for k, s, e in _boxes(data, start, end) if k == kind), None)


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, payload start, payload end) of each box between start and end; stops at one that does not fit."""
    position = start
    for _ in range(_MAX_BOXES):
        if position + _HEADER > end:
            return
        size, kind, header = int.from_bytes(data[position:position + 4], "big"), data[position + 4:position + 8], _HEADER
        if size == 1 and position + 16 <= end:  # a 64-bit size follows the type
            size, header = int.from_bytes(data[position + 8:position + 16], "big"), 16
        elif size == 0:  # the box runs to the end of its parent
            size = end - position
        if size < header or position + size > end:
            return
        yield kind, position + header, position + size
        position += size
