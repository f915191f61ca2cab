"""RoIAlign for R-CNN heads on the CPU as one gather over channels-last feature maps.

torchvision's CPU RoIAlign walks one channel plane at a time with scalar arithmetic; with 150 proposals
per image, 256 channels and a 7x7 output of 2x2 samples each it was the largest cost left in a
Faster R-CNN whose backbone runs in OpenVINO (about 37% of the worker's time), and it zero-fills its
output twice. Every output cell is a fixed-size weighted sum of feature-map pixels (4 samples x 4
bilinear corners at sampling ratio 2), so all cells of all levels are one `embedding_bag` over a
table of pixels whose rows are the 256 channels: vectorised, no zero fill, one call for all levels.

The sample positions and their weights follow torchvision's kernel to the letter (samples more than
one pixel outside the map count zero; samples on the last row or column clamp to it; `aligned`
shifts by half a pixel; unaligned boxes are at least one pixel), so answers agree with
`torchvision.ops.roi_align` to float rounding (`tests/unit/test_roi_pool.py`).

The pooled maps come back as `[R, C, h, w]` views of `[R, h, w, C]` memory (channels last). Convolution
heads (Mask R-CNN, the v2 box head) take them as they are; the two-layer MLP box head would copy them
back to channels first to flatten, so `ChannelsLastMLPHead` reorders fc6's input columns once instead.
The CUDA path keeps torchvision's kernels: `GatheredRoIAlign` hands non-CPU maps to its original pooler.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.models.detection.faster_rcnn import TwoMLPHead
from torchvision.ops import poolers
from torchvision.ops.poolers import MultiScaleRoIAlign


def _axis_samples(start: Tensor, length: Tensor, bins: int, ratio: int, size: Tensor) -> tuple[Tensor, Tensor]:
    """Along one axis: for each roi and bin, the two neighbouring pixels of each sample and their weights
    (zero when the sample lies more than a pixel beyond the map). Shapes `[R, bins, ratio * 2]`."""
    step = (length / bins)[:, None, None]
    bin_index = torch.arange(bins, dtype=start.dtype)[None, :, None]
    sample = (torch.arange(ratio, dtype=start.dtype) + 0.5)[None, None, :]
    position = start[:, None, None] + bin_index * step + sample * step / ratio  # torchvision's order of operations
    size = size[:, None, None].to(start.dtype)
    outside = (position < -1.0) | (position > size)
    position = position.clamp(min=0.0)
    low = position.floor()
    at_edge = low >= size - 1
    low = torch.where(at_edge, size - 1, low)
    high = torch.where(at_edge, low, low + 1)
    fraction = torch.where(at_edge, torch.zeros_like(position), position - low)
    weights = torch.stack([1.0 - fraction, fraction], -1).masked_fill(outside[..., None], 0.0)
    return torch.stack([low, high], -1).int().flatten(2), weights.flatten(2)


def bilinear_gather(rois: Tensor, scale: Tensor, first_pixel: Tensor, heights: Tensor, widths: Tensor,
                    output_size: tuple[int, int], ratio: int, aligned: bool = False) -> tuple[Tensor, Tensor]:
    """For each roi `(x1, y1, x2, y2)` (image pixels) on a map of `heights x widths` at `scale` whose pixel
    (0, 0) is row `first_pixel` of the table: the table row and weight of each bilinear corner of each
    sample of each output cell, shaped `[R * h * w, ratio * ratio * 4]`; the weights already divide by
    the number of samples, so a cell is their weighted sum."""
    offset = 0.5 if aligned else 0.0
    start_x, start_y = rois[:, 0] * scale - offset, rois[:, 1] * scale - offset
    width, height = rois[:, 2] * scale - offset - start_x, rois[:, 3] * scale - offset - start_y
    if not aligned:
        width, height = width.clamp(min=1.0), height.clamp(min=1.0)
    out_h, out_w = output_size
    rows, row_weights = _axis_samples(start_y, height, out_h, ratio, heights)
    cols, col_weights = _axis_samples(start_x, width, out_w, ratio, widths)
    rows = first_pixel[:, None, None] + rows * widths[:, None, None]
    # [R, out_h, out_w, row terms, column terms]: the only two full-size operations (five dimensions
    # broadcast about 3x faster than seven)
    index = rows[:, :, None, :, None] + cols[:, None, :, None, :]
    weights = row_weights[:, :, None, :, None] * (col_weights / (ratio * ratio))[:, None, :, None, :]
    cells = rois.shape[0] * out_h * out_w
    return index.reshape(cells, -1), weights.reshape(cells, -1)


def roi_align_gathered(maps: list[Tensor], rois: Tensor, levels: Tensor, scales: list[float],
                       output_size: tuple[int, int], ratio: int, aligned: bool = False) -> Tensor:
    """RoIAlign of `rois` (`[R, 5]`: image index, x1, y1, x2, y2) each on the map `levels` names, as
    torchvision computes it for a positive `ratio`; `[R, C, h, w]` in channels-last memory."""
    channels = maps[0].shape[1]
    table = torch.cat([level.permute(0, 2, 3, 1).reshape(-1, channels) for level in maps])
    sizes = torch.tensor([[level.shape[2], level.shape[3]] for level in maps], dtype=torch.int32)
    starts = torch.tensor([0] + [level.numel() // channels for level in maps[:-1]], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    heights, widths = sizes[levels, 0], sizes[levels, 1]
    if table.shape[0] >= 2**31:
        raise ValueError(f"RoIAlign over {table.shape[0]} feature-map pixels: more than int32 indices reach")
    first_pixel = starts[levels] + rois[:, 0].int() * heights * widths
    scale = torch.tensor(scales, dtype=rois.dtype)[levels]
    index, weights = bilinear_gather(rois[:, 1:], scale, first_pixel, heights, widths, output_size, ratio, aligned)
    pooled = torch.nn.functional.embedding_bag(index, table, per_sample_weights=weights, mode="sum")
    return pooled.reshape(rois.shape[0], *output_size, channels).permute(0, 3, 1, 2)


class GatheredRoIAlign(torch.nn.Module):
    """A `MultiScaleRoIAlign` (same maps, output size, sampling ratio and level rule) pooling fp32 CPU maps
    with `roi_align_gathered`; other devices and dtypes, and adaptive sampling, go to the original pooler."""

    def __init__(self, original: MultiScaleRoIAlign) -> None:
        super().__init__()
        self.original = original

    def forward(self, x: dict[str, Tensor], boxes: list[Tensor], image_shapes: list[tuple[int, int]]) -> Tensor:
        pooler = self.original
        maps = poolers._filter_input(x, pooler.featmap_names)
        if maps[0].device.type != "cpu" or maps[0].dtype != torch.float32 or pooler.sampling_ratio <= 0:
            return pooler(x, boxes, image_shapes)
        if pooler.scales is None or pooler.map_levels is None:
            pooler.scales, pooler.map_levels = poolers._setup_scales(
                maps, image_shapes, pooler.canonical_scale, pooler.canonical_level)
        rois = poolers._convert_to_roi_format(boxes)
        levels = pooler.map_levels(boxes) if len(maps) > 1 else torch.zeros(len(rois), dtype=torch.int64)
        if len(rois) == 0:
            return maps[0].new_zeros((0, maps[0].shape[1], *pooler.output_size))
        return roi_align_gathered(maps, rois, levels.long(), pooler.scales, pooler.output_size, pooler.sampling_ratio)


class ChannelsLastMLPHead(torch.nn.Module):
    """torchvision's `TwoMLPHead` taking pooled maps in channels-last memory: fc6's input columns are
    reordered once from (channel, row, column) to (row, column, channel), so flattening is a view."""

    def __init__(self, head: TwoMLPHead, channels: int) -> None:
        super().__init__()
        self.fc6, self.fc7 = head.fc6, head.fc7
        weight = self.fc6.weight.data
        cells = weight.shape[1] // channels
        self.fc6.weight.data = weight.reshape(-1, channels, cells).transpose(1, 2).reshape(weight.shape).contiguous()

    def forward(self, x: Tensor) -> Tensor:
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        return torch.relu(self.fc7(torch.relu(self.fc6(x))))


def gather_roi_pooling(detector: torch.nn.Module) -> int:
    """Put `GatheredRoIAlign` in place of an R-CNN's box and mask poolers (and the channels-last MLP box
    head where it has torchvision's); the number of poolers replaced (0 for one-stage detectors)."""
    heads = getattr(detector, "roi_heads", None)
    replaced = 0
    for name in ("box_roi_pool", "mask_roi_pool"):
        pooler = getattr(heads, name, None)
        if isinstance(pooler, MultiScaleRoIAlign):
            setattr(heads, name, GatheredRoIAlign(pooler))
            replaced += 1
    if replaced and isinstance(heads.box_head, TwoMLPHead):
        out_h, out_w = heads.box_roi_pool.original.output_size
        heads.box_head = ChannelsLastMLPHead(heads.box_head, heads.box_head.fc6.in_features // (out_h * out_w))
    return replaced
