"""Instance masks as COCO RLE at the photo's size, pasted one box at a time, within a budget of pixels.

torchvision's `paste_masks_in_image` makes a float (H, W) image per instance and stacks them: about
2 x K x H x W x 4 bytes, 9 GiB for 100 masks on a 12 MP photo. Here each mask is resized into its own
box only, with torchvision's very arithmetic (`expand_masks`, `expand_boxes`, then `paste_mask_in_image`'s
box size, bilinear resize and clipping), thresholded, and encoded straight to the image-sized RLE
(`rle.encode_placed`): memory follows the largest box, not the number of masks times the photo.

Time follows the pixels pasted, the sum of the (padded) boxes' areas: ~80 ms per 12 MP on one thread of a
2-vCPU AMD EPYC. A detector keeps up to its cap of boxes (100 for torchvision's R-CNNs), and a client may
lower `score_threshold` to the model's floor, so 100 boxes each covering a 40 MP photo would be 4,000 MP:
seconds of a worker for one request. So one image's masks paste at most `max_pixels` (the archive's
`detect.max_mask_pixels`). Past it, every mask is pasted at a reduced resolution, the photo's grid scaled
by one factor (the same for height and width) until the boxes fit, and each mask then carries
`photo_size`, the photo's [height, width], beside its reduced `size`. Reduced rather than refused: the cost
comes from what the model found on the photo, not from anything the client can correct (a crowded 40 MP
photo reaches it at the default threshold), and a mask is predicted at 28 x 28 per box, so a grid that
still gives each box hundreds of pixels a side loses nothing the model knew. A client upsamples the
decoded mask to `photo_size` (nearest neighbour).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf
from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

from ..common.defaults import MAX_MASK_PIXELS
from .rle import encode_placed

PADDING = 1  # paste_masks_in_image's own: a pixel of zeros around each mask before it is resized
SHRINK = 0.95  # a reduced grid shrinks at least by this per step: rounding may leave the first guess just over


def encode_masks(masks: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int], threshold: float,
                 max_pixels: int = MAX_MASK_PIXELS) -> list[dict]:
    """(K, 1, M, M) mask probabilities and their (K, 4) boxes in the photo's pixels -> K COCO RLEs of
    the photo's (height, width) `size`: a pixel is set where the pasted probability is at least `threshold`
    (outside its box the probability is 0, as torchvision pastes it). Where the boxes would paste more than
    `max_pixels`, the RLEs are of a reduced grid and carry `photo_size` (the module's docstring)."""
    if masks.shape[0] == 0:
        return []
    padded, scale = expand_masks(masks.float(), padding=PADDING)
    grid, scaled = mask_grid(boxes.float(), scale, size, max_pixels)
    expanded = expand_boxes(scaled, scale).to(dtype=torch.int64)
    outside = 0.0 >= threshold
    encoded = [encode_placed(*pasted_in_box(mask[0], box, grid, threshold), grid, outside) for mask, box in zip(padded, expanded)]
    if grid != tuple(size):
        for rle in encoded:
            rle["photo_size"] = [int(size[0]), int(size[1])]
    return encoded


def mask_grid(boxes: torch.Tensor, scale: float, size: tuple[int, int], max_pixels: int) -> tuple[tuple[int, int], torch.Tensor]:
    """The (height, width) grid the masks are pasted on and the boxes in its pixels: the photo's own where
    the boxes paste at most `max_pixels`, else the largest grid of the photo's shape where they do (1 x 1 at
    the least: each box pastes at least one pixel)."""
    height, width = size
    factor, grid, scaled = 1.0, (height, width), boxes
    while (cost := pasted_pixels(expand_boxes(scaled, scale).to(torch.int64))) > max_pixels and grid != (1, 1):
        factor *= min(SHRINK, math.sqrt(max_pixels / cost))
        grid = (max(1, int(height * factor)), max(1, int(width * factor)))
        scaled = boxes * torch.tensor([grid[1] / width, grid[0] / height] * 2)
    return grid, scaled


def pasted_pixels(expanded: torch.Tensor) -> int:
    """Pixels `pasted_in_box` resizes for these (K, 4) integer boxes: each box's whole area, at least one pixel."""
    sides = (expanded[:, 2:] - expanded[:, :2] + 1).clamp(min=1)
    return int((sides[:, 0] * sides[:, 1]).sum())


def pasted_in_box(mask: torch.Tensor, box: torch.Tensor, size: tuple[int, int], threshold: float) -> tuple[torch.Tensor, tuple[int, int]]:
    """The thresholded mask over the part of the photo its (expanded, integer) box covers, and that part's
    (top, left): torchvision's `paste_mask_in_image` without the photo-sized canvas."""
    height, width = size
    x1, y1, x2, y2 = box.tolist()
    box_size = (max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1))
    resized = nnf.interpolate(mask[None, None], size=box_size, mode="bilinear", align_corners=False)[0, 0]
    left, right = max(x1, 0), min(x2 + 1, width)
    top, bottom = max(y1, 0), min(y2 + 1, height)
    part = resized[top - y1:max(bottom, top) - y1, left - x1:max(right, left) - x1]
    return part >= threshold, (top, left)
