"""Pre-activation ResNets (He et al., 2016b, "v2"), the ResNets the paper uses throughout.

Every BN-ReLU of the original sits in front of a convolution; each is one pluggable
norm-act layer ``make(C, True)``. There is no BN without activation in this design (the
projection shortcut is a bare convolution), so ``make(C, False)`` is never called.

Layout: a 7x7/2 stem convolution and a 3x3/2 max-pool, four stages of bottleneck blocks
(stride on the first block's 3x3 convolution, projection shortcut from the pre-activated
input), a final norm-act, global average pooling and a linear classifier.
"""
from __future__ import annotations

import math
from typing import Sequence

from torch import Tensor, nn

from ..registry import NormActMaker
from .blocks import StridePlan, conv, init_weights

STAGE_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
STAGE_WIDTHS = (64, 128, 256, 512)  # bottleneck widths at 1x; block outputs are 4x these
EXPANSION = 4


class PreActBottleneck(nn.Module):
    """``x + conv1x1(na(conv3x3(na(conv1x1(na(x))))))`` with a projection when shapes change."""

    def __init__(self, in_channels: int, width: int, stride: int, make: NormActMaker) -> None:
        super().__init__()
        out_channels = width * EXPANSION
        self.preact = make(in_channels, True)
        self.conv1 = conv(in_channels, width, 1)
        self.norm_act1 = make(width, True)
        self.conv2 = conv(width, width, 3, stride)
        self.norm_act2 = make(width, True)
        self.conv3 = conv(width, out_channels, 1)
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = conv(in_channels, out_channels, 1, stride) if needs_projection else None

    def forward(self, x: Tensor) -> Tensor:
        out = self.preact(x)
        shortcut = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(self.norm_act1(out))
        out = self.conv3(self.norm_act2(out))
        return out + shortcut


def scaled(channels: int, width_multiplier: float) -> int:
    """``channels * width_multiplier`` rounded, at least 1."""
    return max(1, int(round(channels * width_multiplier)))


class PreActResNet(nn.Module):
    """A pre-activation bottleneck ResNet with a pluggable norm-act layer.

    Args:
        depths: blocks per stage, e.g. ``(3, 4, 6, 3)`` for ResNet-50.
        make: ``make(num_channels, nonlinearity) -> nn.Module`` (see
            :func:`evonorm_core.norm_act_factory`).
        num_classes: classifier outputs.
        width_multiplier: scales every channel count (the CIFAR anchor uses 0.25).
        depth_multiplier: scales every stage's block count, rounded up.
        unstrided_downsamples: how many of the first downsampling convolutions run at
            stride 1 (the CIFAR anchor uses 2, see :class:`~evonorm_core.classifiers.blocks.StridePlan`).
    """

    def __init__(
        self,
        depths: Sequence[int],
        make: NormActMaker,
        num_classes: int = 1000,
        width_multiplier: float = 1.0,
        depth_multiplier: float = 1.0,
        unstrided_downsamples: int = 0,
    ) -> None:
        super().__init__()
        strides = StridePlan(unstrided_downsamples)
        stem_channels = scaled(64, width_multiplier)
        self.stem = nn.Sequential(
            conv(3, stem_channels, 7, strides.next(2)), nn.MaxPool2d(3, stride=2, padding=1)
        )
        blocks: list[nn.Module] = []
        in_channels = stem_channels
        for stage, (depth, base_width) in enumerate(zip(depths, STAGE_WIDTHS)):
            width = scaled(base_width, width_multiplier)
            for index in range(math.ceil(depth * depth_multiplier)):
                stride = strides.next(2 if stage > 0 and index == 0 else 1)
                blocks.append(PreActBottleneck(in_channels, width, stride, make))
                in_channels = width * EXPANSION
        self.blocks = nn.Sequential(*blocks)
        self.final_norm_act = make(in_channels, True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        self.num_features = in_channels
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.final_norm_act(self.blocks(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))

