"""Multiply-adds and parameters of a config's model (paper Table 4's cost columns).

MAdds are counted by fvcore (one multiply-add = one flop) for one ``IMAGE_SIZE`` x
``IMAGE_SIZE`` image in inference, part by part so that the count does not depend on what a
randomly initialised model predicts: backbone + FPN + RPN head on the image, the box head and
box predictor on ``RPN.POST_NMS_TOPK_TEST`` RoIs, the mask head on
``TEST.DETECTIONS_PER_IMAGE`` RoIs. fvcore counts convolutions, matrix products,
BatchNorm/GroupNorm and upsampling; the element-wise arithmetic of the norm-act layers (and
RoIAlign, NMS, box decoding) is not counted, and :func:`model_cost` returns those uncounted
op names.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import torch
from detectron2.modeling import build_model
from fvcore.nn import FlopCountAnalysis
from torch import nn


class ModelCost(NamedTuple):
    madds_b: float  # billions
    params_m: float  # millions
    uncounted_ops: dict[str, int]  # op name -> number of calls fvcore skipped


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class BoxBranch(nn.Module):
    """Box head followed by the box predictor, as one module to count."""

    def __init__(self, roi_heads: nn.Module) -> None:
        super().__init__()
        self.head, self.predictor = roi_heads.box_head, roi_heads.box_predictor

    def forward(self, x: torch.Tensor):
        return self.predictor(self.head(x))


class MaskBranch(nn.Module):
    """The mask head's layers (its forward also needs instances), as one module to count."""

    def __init__(self, roi_heads: nn.Module) -> None:
        super().__init__()
        self.head = roi_heads.mask_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head.layers(x)


def count(module: nn.Module, inputs: tuple) -> tuple[float, Counter]:
    flops = FlopCountAnalysis(module, inputs)
    flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    return flops.total(), Counter(flops.unsupported_ops())


def model_cost(cfg, image_size: int = 1024) -> ModelCost:
    """Cost of the Mask R-CNN of ``cfg`` on one square image (see the module docstring)."""
    cfg = cfg.clone()
    cfg.defrost()
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg).eval()
    image = torch.randint(0, 256, (3, image_size, image_size), generator=torch.Generator().manual_seed(0))
    roi_heads = model.roi_heads
    with torch.no_grad():
        images = model.preprocess_image([{"image": image.float()}]).tensor
        features = model.backbone(images)
        rpn_inputs = [features[f] for f in model.proposal_generator.in_features]
        box_roi = roi_heads.box_pooler.output_size
        mask_roi = roi_heads.mask_pooler.output_size
        channels = features[roi_heads.box_in_features[0]].shape[1]
        parts = [
            count(model.backbone, (images,)),
            count(model.proposal_generator.rpn_head, (rpn_inputs,)),
            count(BoxBranch(roi_heads), (torch.zeros(cfg.MODEL.RPN.POST_NMS_TOPK_TEST, channels, *box_roi),)),
            count(MaskBranch(roi_heads), (torch.zeros(cfg.TEST.DETECTIONS_PER_IMAGE, channels, *mask_roi),)),
        ]
    total = sum(madds for madds, _ in parts)
    uncounted = sum((ops for _, ops in parts), Counter())
    return ModelCost(total / 1e9, count_parameters(model) / 1e6, dict(uncounted))
