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

import argparse
import sys
from collections import Counter
from typing import NamedTuple

# First, so that its warning filter is in place before detectron2 is imported when this
# file is run as `python detection/<name>.py` (the package is then not imported first).
import evonorm_suite.detection  # noqa: F401

# isort: split

import torch
from detectron2.modeling import build_model
from fvcore.nn import FlopCountAnalysis
from torch import nn

from evonorm_core.experiment.tables import format_number, markdown_table
from evonorm_suite.detection.config import load_config
from evonorm_suite.detection.paper import paper_cells


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


def main(argv: list[str] | None = None) -> int:
    """Print MAdds (fvcore, one square image) and parameters of configs next to paper Table 4."""
    parser = argparse.ArgumentParser(
        prog="python tools/model_cost.py", description=main.__doc__,
        epilog="e.g. python tools/model_cost.py --config detection/configs/mask_rcnn_R50_*.yaml",
    )
    parser.add_argument("--config", "--config-file", nargs="+", required=True, metavar="FILE",
                        help="config file(s), .yaml; KEY VALUE overrides may follow the last one")
    parser.add_argument("--image-size", type=int, default=1024, help="side of the square input image (default: 1024, the paper's)")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for torch, >= 0 (default %(default)s: torch's default)")
    parser.add_argument("--show-uncounted", action="store_true", help="also list the ops fvcore did not count")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides, applied to every config "
                        "(after the other flags)")
    args = parser.parse_args(argv)
    for flag, value, minimum in (("--image-size", args.image_size, 32), ("--threads", args.threads, 0)):
        if value < minimum:
            parser.error(f"{flag} must be >= {minimum}, got {value}")
    # --config takes every word up to the next flag: the overrides that follow the files are among them
    first_override = next((i for i, word in enumerate(args.config) if not word.endswith((".yaml", ".yml"))),
                          len(args.config))
    configs, opts = args.config[:first_override], args.config[first_override:] + args.opts
    if not configs:
        parser.error(f"--config needs at least one .yaml file, got {args.config}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    header = [f"config ({args.image_size}x{args.image_size})", "MAdds (B)", "paper MAdds (B)", "Params (M)", "paper Params (M)"]
    print(markdown_table(header, []), flush=True)
    for config_file in configs:
        try:
            cost = model_cost(load_config(config_file, opts), args.image_size)
        except (AssertionError, KeyError, ValueError) as error:  # yacs: an unknown key, an odd override list
            parser.error(f"config {config_file} with overrides {opts}: {error}")
        paper_madds, paper_params = paper_cells(config_file, ("MAdds (B)", "params (M)"))
        row = [config_file, f"{cost.madds_b:.1f}", format_number(paper_madds), f"{cost.params_m:.2f}",
               format_number(paper_params, 2)]
        print(markdown_table(header, [row]).splitlines()[-1], flush=True)  # a row as soon as it is counted
        if args.show_uncounted:
            print(f"{config_file}: not counted by fvcore: {cost.uncounted_ops}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
