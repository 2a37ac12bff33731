"""Multiply-adds and parameters of a config's model (paper Table 4's cost columns).

MAdds are counted by fvcore (through detectron2's ``FlopCountAnalysis``, which counts one
multiply-add as one flop) for one ``IMAGE_SIZE`` x ``IMAGE_SIZE`` image in inference, with
exactly ``RPN.POST_NMS_TOPK_TEST`` proposals reaching the box head and
``TEST.DETECTIONS_PER_IMAGE`` detections reaching the mask head: the score threshold is 0
and both NMS thresholds 1, so the count does not depend on what a randomly initialised
model happens to predict. fvcore counts convolutions,
matrix products, BatchNorm/GroupNorm and upsampling; the element-wise arithmetic of the
norm-act layers (and of box decoding) is not counted, and :func:`model_cost` returns those
uncounted op names.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from detectron2.modeling import build_model
from detectron2.utils.analysis import FlopCountAnalysis


class ModelCost(NamedTuple):
    madds_b: float  # billions
    params_m: float  # millions
    uncounted_ops: dict[str, int]  # op name -> number of calls fvcore skipped


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def model_cost(cfg, image_size: int = 1024) -> ModelCost:
    """Cost of the model of ``cfg`` (a frozen or unfrozen detectron2 config) on one square image."""
    cfg = cfg.clone()
    cfg.defrost()
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.ROI_HEADS.SCORE_THRESH_TEST = 0.0
    cfg.MODEL.ROI_HEADS.NMS_THRESH_TEST = 1.0
    cfg.MODEL.RPN.NMS_THRESH = 1.0
    model = build_model(cfg).eval()
    image = torch.randint(0, 256, (3, image_size, image_size), generator=torch.Generator().manual_seed(0))
    flops = FlopCountAnalysis(model, [{"image": image.float()}])
    flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with torch.no_grad():
        total = flops.total()
    return ModelCost(total / 1e9, count_parameters(model) / 1e6, dict(flops.unsupported_ops()))
