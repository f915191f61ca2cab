"""A detector whose backbone runs in OpenVINO and whose heads stay eager torchvision code.

A torchvision detector cannot be converted whole: region proposals and non-maximum suppression keep
a number of boxes that depends on the image. Its backbone (with the FPN) is one NCHW tensor in and a
few feature maps out, which OpenVINO's CPU plugin runs faster than eager PyTorch (fused batch norm,
1x1 convolutions through oneDNN). So the `openvino` artifact of a detector holds the backbone's IR
plus, in the same zip, the state_dict of everything else and the names of the feature maps; the
worker builds the eager detector, loads that state and puts the OpenVINO backbone in place of its
own. Boxes, scores and masks come out of the same eager heads the eager artifact runs.

At `int8` the artifact is the same; the worker then runs the fully connected layers of an R-CNN's box
head (12,544 -> 1,024 -> 1,024 over every proposal, about a third of the model's time) as dynamic
int8: weights quantized per output channel once at load, activations per call, so no calibration is
needed. The box predictor (class scores, box deltas) stays fp32. RetinaNet, FCOS and SSD have no such
layers (their heads are convolutions), so int8 is refused for them.
"""

from __future__ import annotations

import io
import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from .openvino_ir import compiled_on_cpu, read_member

HEADS_STATE = "heads_state.pt"
FEATURE_NAMES = "feature_names.json"
BACKBONE_PREFIX = "backbone."


class OpenVinoBackbone(torch.nn.Module):
    """The backbone's IR behind the interface torchvision's heads expect: a padded batch in, an
    ordered dict of feature maps out (names as the eager backbone gave them)."""

    def __init__(self, compiled: Any, names: list[str], out_channels: int) -> None:
        super().__init__()
        self.compiled = compiled
        self.names = names
        self.out_channels = out_channels

    def forward(self, batch: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
        results = self.compiled(batch.detach().float().contiguous().numpy())
        return OrderedDict((name, torch.from_numpy(results[index])) for index, name in enumerate(self.names))


class FeatureMapTuple(torch.nn.Module):
    """The eager backbone answering a tuple of its feature maps: the form OpenVINO's frontend converts."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, batch: torch.Tensor) -> tuple:
        return tuple(self.backbone(batch).values())


def heads_members(detector: torch.nn.Module, names: list[str]) -> dict[str, bytes]:
    """The zip members beside the backbone's IR: every weight outside the backbone, and the map names."""
    buffer = io.BytesIO()
    heads = {key: value for key, value in detector.state_dict().items() if not key.startswith(BACKBONE_PREFIX)}
    torch.save(heads, buffer)
    return {HEADS_STATE: buffer.getvalue(), FEATURE_NAMES: json.dumps(names).encode()}


def linear_box_head(detector: torch.nn.Module) -> torch.nn.Module | None:
    """An R-CNN's box head when it holds fully connected layers (what int8 runs), else None."""
    box_head = getattr(getattr(detector, "roi_heads", None), "box_head", None)
    if box_head is None or not any(isinstance(m, torch.nn.Linear) for m in box_head.modules()):
        return None
    return box_head


def quantize_box_head(detector: torch.nn.Module) -> int:
    """The box head's fully connected layers in dynamic int8 (weights per output channel); their count."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    box_head = linear_box_head(detector)
    if box_head is None:
        raise ValueError("int8 runs an R-CNN box head's fully connected layers in int8, and this detector has none")
    count = sum(isinstance(m, torch.nn.Linear) for m in box_head.modules())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices are not the user's to act on
        detector.roi_heads.box_head = quantize_dynamic(box_head, {torch.nn.Linear: per_channel_dynamic_qconfig})
    return count


def attach_openvino_backbone(detector: torch.nn.Module, ov: Any, path: Path, threads: int) -> torch.nn.Module:
    """`detector` (eager structure, weights not loaded) with the artifact's heads and OpenVINO backbone."""
    heads, names = read_member(path, HEADS_STATE), read_member(path, FEATURE_NAMES)
    if heads is None or names is None:
        raise ValueError(f"{path.name} is an OpenVINO detector artifact without {HEADS_STATE} and {FEATURE_NAMES}; rebuild it "
                         f"with tsvk archive --backend openvino")
    state = torch.load(io.BytesIO(heads), map_location="cpu", weights_only=True)
    missing, unexpected = detector.load_state_dict(state, strict=False)
    outside_backbone = [key for key in missing if not key.startswith(BACKBONE_PREFIX)]
    if outside_backbone or unexpected:
        raise ValueError(f"{path.name}'s heads do not fit the model: missing {outside_backbone[:5]}, unexpected {unexpected[:5]}")
    out_channels = getattr(detector.backbone, "out_channels", 0)
    detector.backbone = OpenVinoBackbone(compiled_on_cpu(ov, path, threads), json.loads(names), out_channels)
    return detector.eval()
