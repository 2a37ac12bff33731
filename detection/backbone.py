"""ResNet + FPN backbone whose norms are the suite's norm-act layers.

Placement (paper Sec. 5.4, following the TensorFlow reference ResNet):

* stem: conv7x7 -> ``make(64, True)`` (replaces BN + ReLU) -> max-pool;
* bottleneck: conv1x1 -> ``make(C, True)``, conv3x3 -> ``make(C, True)``,
  conv1x1 -> ``make(4C, False)``; projection shortcut conv -> ``make(4C, False)``; the
  ReLU after the residual addition stays (it follows an addition, not a norm);
* basic block (R-18/34, used by the CPU demo, any width): the same rule for its two convs;
* FPN: lateral and output convs -> ``make(256, False)`` (detectron2's FPN has no
  activation after its norms).

With ``nonlinearity=False`` an EvoNorm is the affine ``x * gamma + beta`` and a baseline
its normalization without activation, so the BN-ReLU and GN-ReLU baselines are exactly
detectron2's SyncBN and GN models.
"""
from __future__ import annotations

import torch.nn.functional as F
from detectron2.layers import CNNBlockBase, Conv2d, ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY, FPN, Backbone
from detectron2.modeling.backbone.fpn import LastLevelMaxPool
from detectron2.modeling.backbone.resnet import ResNet
from fvcore.nn import weight_init
from torch import Tensor

from evonorm_core import NormActMaker
from evonorm_suite.detection.norm import norm_act_maker

BLOCKS_PER_STAGE = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def conv_norm_act(
    in_channels: int, out_channels: int, kernel_size: int, make: NormActMaker, nonlinearity: bool, **conv_args
) -> Conv2d:
    """A bias-free conv followed by ``make(out_channels, nonlinearity)``, MSRA-initialised."""
    conv = Conv2d(
        in_channels,
        out_channels,
        kernel_size=kernel_size,
        padding=(kernel_size - 1) // 2,
        bias=False,
        norm=make(out_channels, nonlinearity),
        **conv_args,
    )
    weight_init.c2_msra_fill(conv)
    return conv


def projection_shortcut(in_channels: int, out_channels: int, stride: int, make: NormActMaker) -> Conv2d | None:
    """conv1x1 -> norm without activation when the shape changes, otherwise identity (None)."""
    if in_channels == out_channels and stride == 1:
        return None
    return conv_norm_act(in_channels, out_channels, 1, make, False, stride=stride)


class NormActStem(CNNBlockBase):
    """conv7x7/2 -> norm-act -> max-pool 3x3/2."""

    def __init__(self, in_channels: int = 3, out_channels: int = 64, *, make: NormActMaker) -> None:
        super().__init__(in_channels, out_channels, 4)
        self.conv1 = conv_norm_act(in_channels, out_channels, 7, make, True, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(self.conv1(x), kernel_size=3, stride=2, padding=1)


class NormActBottleneckBlock(CNNBlockBase):
    """1x1 -> 3x3 -> 1x1 bottleneck; the first two norms carry the activation, the last does not."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        bottleneck_channels: int,
        make: NormActMaker,
        stride: int = 1,
        num_groups: int = 1,
        stride_in_1x1: bool = False,
    ) -> None:
        super().__init__(in_channels, out_channels, stride)
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.shortcut = projection_shortcut(in_channels, out_channels, stride, make)
        self.conv1 = conv_norm_act(in_channels, bottleneck_channels, 1, make, True, stride=stride_1x1)
        self.conv2 = conv_norm_act(
            bottleneck_channels, bottleneck_channels, 3, make, True, stride=stride_3x3, groups=num_groups
        )
        self.conv3 = conv_norm_act(bottleneck_channels, out_channels, 1, make, False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv3(self.conv2(self.conv1(x)))
        shortcut = x if self.shortcut is None else self.shortcut(x)
        return F.relu_(out + shortcut)


class NormActBasicBlock(CNNBlockBase):
    """3x3 -> 3x3 residual block of ResNet-18/34; only the first norm carries the activation."""

    def __init__(self, in_channels: int, out_channels: int, *, make: NormActMaker, stride: int = 1) -> None:
        super().__init__(in_channels, out_channels, stride)
        self.shortcut = projection_shortcut(in_channels, out_channels, stride, make)
        self.conv1 = conv_norm_act(in_channels, out_channels, 3, make, True, stride=stride)
        self.conv2 = conv_norm_act(out_channels, out_channels, 3, make, False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv2(self.conv1(x))
        shortcut = x if self.shortcut is None else self.shortcut(x)
        return F.relu_(out + shortcut)


def build_norm_act_resnet(cfg, input_shape: ShapeSpec, make: NormActMaker) -> ResNet:
    """detectron2's :class:`ResNet` assembled from the norm-act stem and blocks above.

    Reads ``MODEL.RESNETS`` (DEPTH, OUT_FEATURES, STEM_OUT_CHANNELS, RES2_OUT_CHANNELS,
    NUM_GROUPS, WIDTH_PER_GROUP, STRIDE_IN_1X1) and ``MODEL.BACKBONE.FREEZE_AT``;
    ``RESNETS.NORM`` is not used (``MODEL.NORM_ACT`` is). Deformable convs and a dilated
    res5 need detectron2's compiled ops and are rejected.
    """
    res = cfg.MODEL.RESNETS
    if res.DEPTH not in BLOCKS_PER_STAGE:
        raise ValueError(f"MODEL.RESNETS.DEPTH={res.DEPTH} is not supported; use one of {sorted(BLOCKS_PER_STAGE)}")
    if any(res.DEFORM_ON_PER_STAGE) or res.RES5_DILATION != 1:
        raise ValueError("the norm-act ResNet supports neither deformable convs nor RES5_DILATION != 1")
    basic = res.DEPTH in (18, 34)
    if basic and res.NUM_GROUPS != 1:
        raise ValueError("ResNet-18/34 need MODEL.RESNETS.NUM_GROUPS=1")
    stem = NormActStem(input_shape.channels, res.STEM_OUT_CHANNELS, make=make)
    in_channels, out_channels = res.STEM_OUT_CHANNELS, res.RES2_OUT_CHANNELS
    bottleneck_channels = res.NUM_GROUPS * res.WIDTH_PER_GROUP
    stages = []
    for index, num_blocks in enumerate(BLOCKS_PER_STAGE[res.DEPTH]):
        first_stride = 1 if index == 0 else 2
        block_args = dict(make=make) if basic else dict(
            make=make,
            bottleneck_channels=bottleneck_channels,
            num_groups=res.NUM_GROUPS,
            stride_in_1x1=res.STRIDE_IN_1X1,
        )
        stages.append(
            ResNet.make_stage(
                NormActBasicBlock if basic else NormActBottleneckBlock,
                num_blocks,
                stride_per_block=[first_stride] + [1] * (num_blocks - 1),
                in_channels=in_channels,
                out_channels=out_channels,
                **block_args,
            )
        )
        in_channels, out_channels, bottleneck_channels = out_channels, out_channels * 2, bottleneck_channels * 2
    return ResNet(stem, stages, out_features=res.OUT_FEATURES, freeze_at=cfg.MODEL.BACKBONE.FREEZE_AT)


@BACKBONE_REGISTRY.register()
def build_norm_act_resnet_fpn_backbone(cfg, input_shape: ShapeSpec) -> Backbone:
    """ResNet + FPN (P2-P6, P6 by max-pooling P5) with ``MODEL.NORM_ACT`` everywhere.

    Select with ``MODEL.BACKBONE.NAME: build_norm_act_resnet_fpn_backbone``.
    """
    make = norm_act_maker(cfg)
    return FPN(
        bottom_up=build_norm_act_resnet(cfg, input_shape, make),
        in_features=cfg.MODEL.FPN.IN_FEATURES,
        out_channels=cfg.MODEL.FPN.OUT_CHANNELS,
        norm=lambda channels: make(channels, False),
        top_block=LastLevelMaxPool(),
        fuse_type=cfg.MODEL.FPN.FUSE_TYPE,
    )
