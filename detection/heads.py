"""RPN, box and mask heads of Mask R-CNN with the suite's norm-act layers.

:class:`NormActRPNHead` is detectron2's ``StandardRPNHead`` (a shared 3x3 conv, then 1x1
objectness and box-delta convs) with its conv -> ReLU turned into conv -> ``make(C, True)``,
as the TensorFlow reference's RPN head with batch normalization: the paper applies EvoNorms
"to both the backbone and the heads". The head is shared by the FPN levels, so a layer with
batch statistics normalizes (and updates its moving averages) once per level.

They are detectron2's ``FastRCNNConvFCHead`` (4 conv + 1 fc, the head detectron2 uses
for its SyncBN/GN Mask R-CNN) and ``MaskRCNNConvUpsampleHead`` with every
conv -> norm -> ReLU turned into conv -> ``make(C, True)``: the activation is part of the
norm-act layer, so the head's own ReLU after it is removed. The fc layers and the
deconvolution have no norm before them and keep their ReLU.

Each norm-act layer is wrapped in :class:`~evonorm_suite.detection.norm.EmptyBatchSafe`: heads can
receive zero RoIs.
"""
from __future__ import annotations

from detectron2.config import configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_BOX_HEAD_REGISTRY, ROI_MASK_HEAD_REGISTRY
from detectron2.modeling.proposal_generator import RPN_HEAD_REGISTRY
from detectron2.modeling.proposal_generator.rpn import StandardRPNHead
from detectron2.modeling.roi_heads import FastRCNNConvFCHead, MaskRCNNConvUpsampleHead
from torch import nn

from evonorm_suite.detection.norm import empty_batch_safe, norm_act_maker


def head_conv_norm(cfg):
    """``conv_norm`` for detectron2's heads: ``channels -> norm-act with activation``."""
    make = empty_batch_safe(norm_act_maker(cfg))
    return lambda channels: make(channels, True)


def drop_activations(convs: list[nn.Module]) -> None:
    """Remove the separate activation after each conv's norm-act (it is in the norm-act)."""
    for conv in convs:
        conv.activation = None


@ROI_BOX_HEAD_REGISTRY.register()
class NormActConvFCHead(FastRCNNConvFCHead):
    """``FastRCNNConvFCHead`` with ``MODEL.NORM_ACT`` after each conv (``ROI_BOX_HEAD.NORM`` unused)."""

    @configurable
    def __init__(self, input_shape: ShapeSpec, *, conv_dims: list[int], fc_dims: list[int], conv_norm) -> None:
        super().__init__(input_shape, conv_dims=conv_dims, fc_dims=fc_dims, conv_norm=conv_norm)
        drop_activations(self.conv_norm_relus)

    @classmethod
    def from_config(cls, cfg, input_shape: ShapeSpec) -> dict:
        return {**super().from_config(cfg, input_shape), "conv_norm": head_conv_norm(cfg)}


@ROI_MASK_HEAD_REGISTRY.register()
class NormActMaskHead(MaskRCNNConvUpsampleHead):
    """``MaskRCNNConvUpsampleHead`` with ``MODEL.NORM_ACT`` after each conv (``ROI_MASK_HEAD.NORM`` unused)."""

    @configurable
    def __init__(self, input_shape: ShapeSpec, *, num_classes: int, conv_dims: list[int], conv_norm, **kwargs) -> None:
        super().__init__(input_shape, num_classes=num_classes, conv_dims=conv_dims, conv_norm=conv_norm, **kwargs)
        drop_activations(self.conv_norm_relus)

    @classmethod
    def from_config(cls, cfg, input_shape: ShapeSpec) -> dict:
        return {**super().from_config(cfg, input_shape), "conv_norm": head_conv_norm(cfg)}


@RPN_HEAD_REGISTRY.register()
class NormActRPNHead(StandardRPNHead):
    """``StandardRPNHead`` with ``MODEL.NORM_ACT`` after its hidden conv(s) instead of a ReLU.

    Select with ``MODEL.RPN.HEAD_NAME: NormActRPNHead``. The hidden convs lose their bias
    (the norm-act's ``beta`` takes its place) and keep detectron2's N(0, 0.01) init.
    """

    @configurable
    def __init__(self, *, in_channels: int, num_anchors: int, box_dim: int = 4, conv_dims=(-1,), conv_norm) -> None:
        super().__init__(in_channels=in_channels, num_anchors=num_anchors, box_dim=box_dim, conv_dims=conv_dims)
        for conv in [self.conv] if len(conv_dims) == 1 else list(self.conv):
            conv.register_parameter("bias", None)
            conv.norm = conv_norm(conv.out_channels)
            conv.activation = None

    @classmethod
    def from_config(cls, cfg, input_shape) -> dict:
        return {**super().from_config(cfg, input_shape), "conv_norm": head_conv_norm(cfg)}
