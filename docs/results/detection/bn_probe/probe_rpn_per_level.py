"""Probe (not a result): a trained detector whose RPN head norm (one layer shared by the five FPN levels) is
given one moving average per level, each recomputed over training batches; box/mask AP and proposal recall.

    python probe_rpn_per_level.py RUN_DIR [BATCHES]
"""
import copy
import json
import sys

import torch
from detectron2.evaluation import inference_on_dataset
from torch import nn
from trained_run import load_trained

from evonorm_core import running_stats
from evonorm_suite.detection.trainer import NormActTrainer


class PerLevel(nn.Module):
    """One copy of ``norm`` per FPN level, called in level order (the RPN head runs once per level)."""

    def __init__(self, norm: nn.Module, levels: int) -> None:
        super().__init__()
        self.copies = nn.ModuleList(copy.deepcopy(norm) for _ in range(levels))
        self.calls = 0

    def forward(self, x):
        out = self.copies[self.calls % len(self.copies)](x)
        self.calls += 1
        return out


run, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50
torch.manual_seed(0)
cfg, model = load_trained(run, "/tmp/probe/out_pl")
model.eval()
levels = len(cfg.MODEL.RPN.IN_FEATURES)
head_conv = model.proposal_generator.rpn_head.conv
per_level = PerLevel(head_conv.norm, levels)
head_conv.norm = per_level
loader = iter(NormActTrainer.build_train_loader(cfg))
data = [next(loader) for _ in range(batches)]


def rpn_forward(_, batch):
    images = model.preprocess_image(batch)
    features = model.backbone(images.tensor)
    model.proposal_generator.rpn_head([features[f] for f in cfg.MODEL.RPN.IN_FEATURES])


per_level.calls = 0
recalibrated = running_stats.recalibrate(per_level, data, rpn_forward)
per_level.calls = 0
dataset = cfg.DATASETS.TEST[0]
with torch.no_grad():
    result = inference_on_dataset(model, NormActTrainer.build_test_loader(cfg, dataset),
                                  NormActTrainer.build_evaluator(cfg, dataset))
print(json.dumps({"run": run, "levels": levels, "recalibrated_layers": recalibrated, "batches": batches,
                  "ap": {k: round(v["AP"], 1) for k, v in result.items()}}))
