"""Box and mask heads of Mask R-CNN with the suite's norm-act layers.

They are detectron2's ``FastRCNNConvFCHead`` (4 conv + 1 fc, the head detectron2 uses
for its SyncBN/GN Mask R-CNN) and ``MaskRCNNConvUpsampleHead`` with every
conv -> norm -> ReLU turned into conv -> ``make(C, True)``: the activation is part of the
norm-act layer, so the head's own ReLU after it is removed. The fc layers and the
deconvolution have no norm before them and keep their ReLU.

Each norm-act layer is wrapped in :class:`~detection.norm.EmptyBatchSafe`: heads can
receive zero RoIs.
"""
from __future__ import annotations

from detectron2.config import configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_BOX_HEAD_REGISTRY, ROI_MASK_HEAD_REGISTRY
from detectron2.modeling.roi_heads import FastRCNNConvFCHead, MaskRCNNConvUpsampleHead
from torch import nn

from .norm import empty_batch_safe, norm_act_maker


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
