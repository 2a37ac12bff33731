"""Inverted-residual ("MBConv") networks: MobileNetV2, MnasNet-B1 and EfficientNet-B0..B7.

One network class, :class:`MBConvNet`, built from a :class:`MBConvConfig`; the three
families differ only in their stage table, squeeze-excitation and head scaling. Each
BN-ReLU / BN-Swish of the original is ``make(C, True)`` (the activation is folded into
the norm-act layer); the BN after each block's linear projection is ``make(C, False)``.
Squeeze-excitation blocks keep their own SiLU/sigmoid: no BN precedes them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from torch import Tensor, nn
from torchvision.ops import SqueezeExcitation, StochasticDepth

from ..registry import NormActMaker
from .blocks import StridePlan, conv, init_weights, make_divisible


@dataclass(frozen=True)
class Stage:
    """A run of ``repeats`` blocks; the first has ``stride``, the rest stride 1."""

    expansion: int
    kernel_size: int
    channels: int
    repeats: int
    stride: int


@dataclass(frozen=True)
class MBConvConfig:
    """What defines one inverted-residual family at 1x width and depth.

    ``head_min_width``: the 1x1 head convolution is scaled by ``max(head_min_width, width)``
    (MobileNetV2 never shrinks its 1280-channel head: 1.0; EfficientNet scales it: 0.0).
    ``se_ratio``: squeeze channels relative to the block's *input* channels (0: no SE).
    """

    stages: tuple[Stage, ...]
    stem_channels: int = 32
    head_channels: int = 1280
    head_min_width: float = 1.0
    se_ratio: float = 0.0
    dropout: float = 0.2
    drop_path_rate: float = 0.0


MOBILENET_V2 = MBConvConfig(
    stages=(
        Stage(1, 3, 16, 1, 1), Stage(6, 3, 24, 2, 2), Stage(6, 3, 32, 3, 2), Stage(6, 3, 64, 4, 2),
        Stage(6, 3, 96, 3, 1), Stage(6, 3, 160, 3, 2), Stage(6, 3, 320, 1, 1),
    ),
)
# MnasNet-B1 (Tan et al., 2019): MnasNet-A1's search result without squeeze-excitation,
# as torchvision's ``mnasnet1_0``; its first "SepConv" is an expansion-1 block.
MNASNET_B1 = MBConvConfig(
    stages=(
        Stage(1, 3, 16, 1, 1), Stage(3, 3, 24, 3, 2), Stage(3, 5, 40, 3, 2), Stage(6, 5, 80, 3, 2),
        Stage(6, 3, 96, 2, 1), Stage(6, 5, 192, 4, 2), Stage(6, 3, 320, 1, 1),
    ),
)
EFFICIENTNET_B0 = MBConvConfig(
    stages=(
        Stage(1, 3, 16, 1, 1), Stage(6, 3, 24, 2, 2), Stage(6, 5, 40, 2, 2), Stage(6, 3, 80, 3, 2),
        Stage(6, 5, 112, 3, 1), Stage(6, 5, 192, 4, 2), Stage(6, 3, 320, 1, 1),
    ),
    head_min_width=0.0,
    se_ratio=0.25,
    drop_path_rate=0.2,
)
# (width, depth, resolution, dropout) from Tan & Le (2019), Table/appendix of the official code.
EFFICIENTNET_SCALING = {
    "b0": (1.0, 1.0, 224, 0.2), "b1": (1.0, 1.1, 240, 0.2), "b2": (1.1, 1.2, 260, 0.3),
    "b3": (1.2, 1.4, 300, 0.3), "b4": (1.4, 1.8, 380, 0.4), "b5": (1.6, 2.2, 456, 0.4),
    "b6": (1.8, 2.6, 528, 0.5), "b7": (2.0, 3.1, 600, 0.5),
}


def efficientnet_config(variant: str) -> tuple[MBConvConfig, float, float, int]:
    """``(config, width, depth, resolution)`` of EfficientNet-``variant`` ('b0'..'b7')."""
    if variant not in EFFICIENTNET_SCALING:
        raise ValueError(f"unknown EfficientNet variant {variant!r}; accepted: {sorted(EFFICIENTNET_SCALING)}")
    width, depth, resolution, dropout = EFFICIENTNET_SCALING[variant]
    return dataclasses.replace(EFFICIENTNET_B0, dropout=dropout), width, depth, resolution


class InvertedResidual(nn.Module):
    """Expand 1x1 -> depthwise kxk -> [squeeze-excitation] -> project 1x1 (linear), plus identity."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stage: Stage,
        stride: int,
        make: NormActMaker,
        se_ratio: float = 0.0,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        hidden = in_channels * stage.expansion
        layers: list[nn.Module] = []
        if stage.expansion != 1:
            layers += [conv(in_channels, hidden, 1), make(hidden, True)]
        layers += [conv(hidden, hidden, stage.kernel_size, stride, groups=hidden), make(hidden, True)]
        if se_ratio > 0:
            layers.append(SqueezeExcitation(hidden, max(1, int(in_channels * se_ratio)), activation=nn.SiLU))
        layers += [conv(hidden, out_channels, 1), make(out_channels, False)]
        self.body = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_channels == out_channels
        self.drop_path = StochasticDepth(drop_path, "row") if self.use_residual and drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = self.body(x)
        return x + self.drop_path(out) if self.use_residual else out


class MBConvNet(nn.Module):
    """An inverted-residual classifier with a pluggable norm-act layer.

    Args:
        config: the family's stage table and head (:data:`MOBILENET_V2`, :data:`MNASNET_B1`,
            :func:`efficientnet_config`).
        make: ``make(num_channels, nonlinearity) -> nn.Module``.
        num_classes: classifier outputs.
        width_multiplier: channel multiplier (rounded to multiples of 8).
        depth_multiplier: block-count multiplier (rounded up), EfficientNet's compound depth.
        unstrided_downsamples: how many of the first downsampling convolutions run at stride
            1 (the CIFAR anchors use 2, see :class:`~evonorm_core.classifiers.blocks.StridePlan`).
    """

    def __init__(
        self,
        config: MBConvConfig,
        make: NormActMaker,
        num_classes: int = 1000,
        width_multiplier: float = 1.0,
        depth_multiplier: float = 1.0,
        unstrided_downsamples: int = 0,
    ) -> None:
        super().__init__()
        strides = StridePlan(unstrided_downsamples)
        channels = make_divisible(config.stem_channels * width_multiplier)
        self.stem = nn.Sequential(conv(3, channels, 3, strides.next(2)), make(channels, True))
        repeats = [math.ceil(stage.repeats * depth_multiplier) for stage in config.stages]
        total, index = sum(repeats), 0
        blocks: list[nn.Module] = []
        for stage, count in zip(config.stages, repeats):
            out_channels = make_divisible(stage.channels * width_multiplier)
            for i in range(count):
                stride = strides.next(stage.stride if i == 0 else 1)
                drop_path = config.drop_path_rate * index / total
                blocks.append(InvertedResidual(channels, out_channels, stage, stride, make, config.se_ratio, drop_path))
                channels, index = out_channels, index + 1
        self.blocks = nn.Sequential(*blocks)
        head = make_divisible(config.head_channels * max(config.head_min_width, width_multiplier))
        self.head = nn.Sequential(conv(channels, head, 1), make(head, True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(config.dropout)
        self.fc = nn.Linear(head, num_classes)
        self.num_features = head
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(self.dropout(self.pool(x).flatten(1)))
