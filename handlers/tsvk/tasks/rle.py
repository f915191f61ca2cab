"""Binary masks as COCO run-length encoding, the format COCO tools and pycocotools read.

A mask is read column by column (Fortran order); `counts` are the lengths of its alternating runs,
starting with a run of zeros (0 when the first pixel is set). The compact form writes each count, minus
the count two before it from the third on, as 5-bit groups in printable characters: what
pycocotools' `frPyObjects`/`decode` accept as `{"size": [h, w], "counts": "..."}`.
"""

from __future__ import annotations

import torch


def run_lengths(mask: torch.Tensor) -> list[int]:
    """Alternating run lengths of a (H, W) bool mask read column by column, the first a run of zeros."""
    flat = mask.t().reshape(-1).to(torch.int8)
    if flat.numel() == 0:
        return [0]
    changes = torch.nonzero(flat[1:] != flat[:-1]).flatten() + 1
    edges = torch.cat([torch.zeros(1, dtype=changes.dtype), changes, torch.tensor([flat.numel()], dtype=changes.dtype)])
    lengths = (edges[1:] - edges[:-1]).tolist()
    return ([0] + lengths) if flat[0].item() else lengths


def compress_counts(counts: list[int]) -> str:
    """COCO's compact string for run lengths (signed differences, 5 bits a character, offset 48)."""
    out = []
    for index, count in enumerate(counts):
        value = count - counts[index - 2] if index > 2 else count
        more = True
        while more:
            chunk = value & 0x1F
            value >>= 5  # arithmetic shift: negative differences end at -1
            more = value != -1 if chunk & 0x10 else value != 0
            out.append(chr((chunk | 0x20 if more else chunk) + 48))
    return "".join(out)


def encode_mask(mask: torch.Tensor) -> dict:
    """{"size": [height, width], "counts": compact string} of a (H, W) bool mask."""
    height, width = mask.shape[-2:]
    return {"size": [int(height), int(width)], "counts": compress_counts(run_lengths(mask.cpu()))}


def decode_counts(text: str) -> list[int]:
    """The run lengths of a compact string: the inverse of `compress_counts` (for clients and tests)."""
    counts: list[int] = []
    position = 0
    while position < len(text):
        value, shift, more = 0, 0, True
        while more:
            chunk = ord(text[position]) - 48
            value |= (chunk & 0x1F) << (5 * shift)
            more = bool(chunk & 0x20)
            position += 1
            shift += 1
            if not more and chunk & 0x10:
                value |= -1 << (5 * shift)
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def decode_mask(rle: dict) -> torch.Tensor:
    """(H, W) bool mask from {"size": [h, w], "counts": str}."""
    height, width = rle["size"]
    values = []
    for index, count in enumerate(decode_counts(rle["counts"])):
        values.append(torch.full((count,), index % 2 == 1, dtype=torch.bool))
    flat = torch.cat(values) if values else torch.zeros(0, dtype=torch.bool)
    return flat.reshape(width, height).t()
