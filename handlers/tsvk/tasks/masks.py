"""Instance masks as COCO RLE at the photo's size, pasted one box at a time.

torchvision's `paste_masks_in_image` makes a float (H, W) image per instance and stacks them: about
2 x K x H x W x 4 bytes, 9 GiB for 100 masks on a 12 MP photo. Here each mask is resized into its own
box only, with torchvision's very arithmetic (`expand_masks`, `expand_boxes`, then `paste_mask_in_image`'s
box size, bilinear resize and clipping), thresholded, and encoded straight to the image-sized RLE
(`rle.encode_placed`): memory follows the largest box, not the number of masks times the photo.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

from .rle import encode_placed

PADDING = 1  # paste_masks_in_image's own: a pixel of zeros around each mask before it is resized


def encode_masks(masks: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int], threshold: float) -> list[dict]:
    """(K, 1, M, M) mask probabilities and their (K, 4) boxes in the photo's pixels -> K COCO RLEs of
    the photo's (height, width) `size`: a pixel is set where the pasted probability is at least `threshold`
    (outside its box the probability is 0, as torchvision pastes it)."""
    if masks.shape[0] == 0:
        return []
    padded, scale = expand_masks(masks.float(), padding=PADDING)
    expanded = expand_boxes(boxes.float(), scale).to(dtype=torch.int64)
    outside = 0.0 >= threshold
    return [encode_placed(*pasted_in_box(mask[0], box, size, threshold), size, outside) for mask, box in zip(padded, expanded)]


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
