"""Binary masks as COCO run-length encoding, the format COCO tools and pycocotools read.

A mask is read column by column (Fortran order); `counts` are the lengths of its alternating runs,
starting with a run of zeros (0 when the first pixel is set). The compact form writes each count, minus
the count two before it from the third on, as 5-bit groups in printable characters: what
pycocotools' `frPyObjects`/`decode` accept as `{"size": [h, w], "counts": "..."}`.
"""

from __future__ import annotations

import numpy as np
import torch


def run_lengths(mask: torch.Tensor) -> list[int]:
    """Alternating run lengths of a (H, W) bool mask read column by column, the first a run of zeros."""
    return placed_run_lengths(mask, (0, 0), (int(mask.shape[0]), int(mask.shape[1])))


def placed_run_lengths(part: torch.Tensor, corner: tuple[int, int], size: tuple[int, int], background: bool = False) -> list[int]:
    """Run lengths of a (height, width) = `size` mask that is `background` everywhere but the (h, w) bool
    `part` whose top-left pixel is at `corner` (top, left), without making the full-size mask: memory
    and time follow the part's area, however large the image."""
    height, width = size
    if height * width == 0:
        return [0]
    changes = _changes(part.numpy() ^ background, corner, height) if part.numel() else np.zeros(0, dtype=np.int64)
    first_set = background ^ bool(changes.size and changes[0] == 0)
    inner = changes[(changes > 0) & (changes < height * width)]  # a run ending with the image ends no earlier
    edges = np.concatenate([np.zeros(1, dtype=np.int64), inner, np.array([height * width], dtype=np.int64)])
    lengths = np.diff(edges).tolist()
    return ([0] + lengths) if first_set else lengths


def _changes(differs: np.ndarray, corner: tuple[int, int], height: int) -> np.ndarray:
    """Column-major positions in the whole image where a run of `differs` pixels starts or ends, ascending.

    Found row by row, in the part's own (row-major) memory order: a run starts at a set pixel of the first
    row, ends below a set pixel of the last row, and starts or ends wherever a pixel differs from the one
    above it. Comparing whole rows is one contiguous pass (a column-major copy of the part cost ten times
    more); only the changes, a few per column, are then sorted into column-major order. Where the part
    spans the image's height, a run ending at the bottom of one column and one starting at the top of the
    next meet at the same position: one run in the image, so the pair is dropped."""
    top, left = corner
    rows, columns = differs.shape
    inside = np.flatnonzero(differs[1:] != differs[:-1])
    found_rows = np.concatenate([np.zeros(np.count_nonzero(differs[0]), np.int64), inside // columns + 1,
                                 np.full(np.count_nonzero(differs[-1]), rows, np.int64)])
    found_columns = np.concatenate([np.flatnonzero(differs[0]), inside % columns, np.flatnonzero(differs[-1])])
    positions = np.sort((left + found_columns) * height + top + found_rows)
    repeated = positions[1:] == positions[:-1]
    if not repeated.any():
        return positions
    joined = np.zeros(positions.shape, dtype=bool)
    joined[1:] |= repeated
    joined[:-1] |= repeated
    return positions[~joined]


COMPRESS_SLICE = 1 << 16  # counts written per vectorised step: a few MB of scratch, however many runs


def compress_counts(counts: list[int]) -> str:
    """COCO's compact string for run lengths (signed differences, 5 bits a character, offset 48).

    Each value is cut into 5-bit groups, lowest first; a group carries 0x20 while more follow, and the
    last is the first after which the rest of the value is just its sign (0, or -1 for a negative
    difference, whose last group has 0x10 set). Written with numpy, a slice of counts at a time: a
    mask of a whole photo has hundreds of thousands of runs."""
    values = np.asarray(counts, dtype=np.int64)
    deltas = values.copy()
    deltas[3:] -= values[1:-2]
    return "".join(_compact(deltas[start:start + COMPRESS_SLICE]) for start in range(0, len(deltas), COMPRESS_SLICE))


def _compact(deltas: np.ndarray) -> str:
    widest = int(np.abs(deltas).max(initial=0)).bit_length() + 1  # bits with the sign
    groups = np.arange(-(-widest // 5) + 1, dtype=np.int64)
    shifted = deltas[:, None] >> (5 * groups)[None, :]
    chunks, rest = shifted & 0x1F, shifted >> 5
    more = np.where(chunks & 0x10, rest != -1, rest != 0)
    used = groups[None, :] <= np.argmin(more, axis=1)[:, None]  # up to the first group with nothing more
    return ((chunks | np.where(more, 0x20, 0)) + 48)[used].astype(np.uint8).tobytes().decode("ascii")


def encode_mask(mask: torch.Tensor) -> dict:
    """{"size": [height, width], "counts": compact string} of a (H, W) bool mask."""
    height, width = mask.shape[-2:]
    return {"size": [int(height), int(width)], "counts": compress_counts(run_lengths(mask.cpu()))}


def encode_placed(part: torch.Tensor, corner: tuple[int, int], size: tuple[int, int], background: bool = False) -> dict:
    """`encode_mask` of the image-sized mask that `placed_run_lengths` describes, never made."""
    counts = placed_run_lengths(part.cpu(), corner, size, background)
    return {"size": [int(size[0]), int(size[1])], "counts": compress_counts(counts)}


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
