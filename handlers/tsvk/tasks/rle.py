"""Binary masks as COCO run-length encoding, the format COCO tools and pycocotools read.

A mask is read column by column (Fortran order); `counts` are the lengths of its alternating runs,
starting with a run of zeros (0 when the first pixel is set). The compact form writes each count, minus
the count two before it from the third on, as 5-bit groups in printable characters: what
pycocotools' `frPyObjects`/`decode` accept as `{"size": [h, w], "counts": "..."}`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as nnf


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
    changes = _changes(part ^ background, corner, height) if part.numel() else torch.zeros(0, dtype=torch.int64)
    first_set = background ^ bool(changes.numel() and changes[0].item() == 0)
    inner = changes[(changes > 0) & (changes < height * width)]  # a run ending with the image ends no earlier
    edges = torch.cat([torch.zeros(1, dtype=torch.int64), inner, torch.tensor([height * width])])
    lengths = (edges[1:] - edges[:-1]).tolist()
    return ([0] + lengths) if first_set else lengths


def _changes(differs: torch.Tensor, corner: tuple[int, int], height: int) -> torch.Tensor:
    """Column-major positions in the whole image where a run of `differs` pixels starts or ends, ascending.

    A row of zeros above and below the part ends every run in its own column, so each change found in the
    padded part maps straight to the image: column `left + c`, row `top + r - 1`. Where the part spans
    the image's height, a run ending at the bottom of one column and one starting at the top of the next
    meet at the same position: one run in the image, so the pair is dropped."""
    top, left = corner
    padded = nnf.pad(differs.t().to(torch.int8), (1, 1))  # (w, h + 2), contiguous: the columns, one after another
    flat = padded.reshape(-1)
    steps = torch.nonzero(flat[1:] != flat[:-1]).flatten() + 1
    rows = padded.shape[1]
    positions = (left + steps // rows) * height + top + steps % rows - 1
    repeated = positions[1:] == positions[:-1]
    if not bool(repeated.any()):
        return positions
    joined = torch.zeros_like(positions, dtype=torch.bool)
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
