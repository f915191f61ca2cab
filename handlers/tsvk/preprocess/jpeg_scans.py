"""The decoding work a JPEG asks for, counted from its markers before any pixel is decoded.

A progressive JPEG is decoded scan by scan, and each scan visits every 8x8 block of the components it
covers, however few bits it carries: the cost is blocks x scans, not pixels. One small AC scan repeated
2,000 times makes a 200 KB 4000x4000 JPEG that takes seconds of CPU to decode (docs/robustness.md),
and a tiny image with a million empty scans costs about a microsecond each. `scan_work` walks the
marker segments once (the entropy-coded data after each SOS is skipped by searching for the next
marker) and counts the scans and the blocks they visit, so the probe can refuse such a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SOI, _EOI, _SOS = 0xD8, 0xD9, 0xDA
# Start Of Frame: every coding process (C4 DHT, C8 JPG and CC DAC share the range but are not frames).
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_STANDALONE = frozenset({0x01, _SOI, *range(0xD0, 0xD8)})  # TEM, SOI, RST0-7: no length field
# In entropy-coded data an FF byte is followed by 00 (a stuffed FF), D0-D7 (a restart marker) or FF
# (fill before a marker); anything else is the next marker, which this finds (its last FF).
_NEXT_MARKER = re.compile(rb"\xff[\x01-\xcf\xd8-\xfe]")
BLOCK = 8


@dataclass(frozen=True)
class ScanWork:
    """What decoding a JPEG costs: its scans, and the 8x8 blocks those scans visit in all."""

    scans: int = 0
    blocks: int = 0


def scan_work(data: bytes, width: int, height: int, max_scans: int) -> ScanWork:
    """The scans and block visits of the first image in `data` (an MPO's first frame: what is decoded).

    Stops counting once there are more than `max_scans` scans. Structure it cannot follow (corrupt or
    truncated data) ends the walk with what was counted: the decoder then refuses the file itself."""
    if not data.startswith(b"\xff\xd8"):
        return ScanWork()
    sampling: dict[int, tuple[int, int]] = {}
    scans = blocks = 0
    position = 2
    while position + 4 <= len(data) and data[position] == 0xFF:
        marker = data[position + 1]
        if marker == 0xFF or marker in _STANDALONE:
            position += 1 if marker == 0xFF else 2
            continue
        if marker == _EOI:
            break
        end = position + 2 + int.from_bytes(data[position + 2:position + 4], "big")
        if marker in _SOF_MARKERS:
            sampling = _frame_sampling(data[position + 4:end])
        elif marker == _SOS:
            scans += 1
            blocks += _scan_blocks(data[position + 4:end], sampling, width, height)
            found = _NEXT_MARKER.search(data, end) if scans <= max_scans else None
            if found is None:
                break
            end = found.start()
        position = end
    return ScanWork(scans, blocks)


def _frame_sampling(segment: bytes) -> dict[int, tuple[int, int]]:
    """Component id -> (horizontal, vertical) sampling factor, from a frame header (SOFn)."""
    count = segment[5] if len(segment) > 5 else 0
    fields = segment[6:6 + 3 * count]
    return {fields[i]: (max(fields[i + 1] >> 4, 1), max(fields[i + 1] & 0x0F, 1)) for i in range(0, len(fields) - 2, 3)}


def _scan_blocks(segment: bytes, sampling: dict[int, tuple[int, int]], width: int, height: int) -> int:
    """8x8 blocks one scan visits: each of its components' blocks (a component unknown to the frame is
    counted at full size, the most it could be)."""
    ids = segment[1:1 + 2 * segment[0]:2] if segment else b""
    h_max = max((h for h, _ in sampling.values()), default=1)
    v_max = max((v for _, v in sampling.values()), default=1)
    if len(ids) > 1:  # interleaved: whole MCUs, each holding h x v blocks of every component in the scan
        mcus = _ceil(width, BLOCK * h_max) * _ceil(height, BLOCK * v_max)
        return mcus * sum(h * v for h, v in (sampling.get(i, (h_max, v_max)) for i in ids))
    total = 0
    for component in ids:
        h, v = sampling.get(component, (h_max, v_max))
        total += _ceil(_ceil(width * h, h_max), BLOCK) * _ceil(_ceil(height * v, v_max), BLOCK)
    return total


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)
