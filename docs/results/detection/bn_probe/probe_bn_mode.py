"""Probe (one run, not a result): a trained BN-ReLU detector evaluated with some of its batch-statistics
layers normalizing with the inference batch's statistics instead of their moving averages.

    python docs/results/detection/bn_probe/probe_bn_mode.py RUN_DIR {all,heads,backbone,proposal_generator,...}
"""

import sys

import torch
from detectron2.evaluation import inference_on_dataset
from trained_run import load_trained

from evonorm_core import running_stats
from evonorm_suite.detection.trainer import NormActTrainer

run, parts = (
    sys.argv[1],
    sys.argv[2],
)  # which layers use batch statistics: all, heads (outside the backbone), or a name prefix
cfg, model = load_trained(run, f"/tmp/probe_mode_{parts}")
model.eval()
layers = [(n, m) for n, m in model.named_modules() if running_stats.is_batch_statistics_layer(m)]


def chosen_layer(name: str) -> bool:
    if parts == "heads":
        return not name.startswith("backbone")
    return parts == "all" or name.startswith(parts)


chosen = [(n, m) for n, m in layers if chosen_layer(n)]
print(
    len(layers),
    "batch-statistics layers;",
    len(chosen),
    "switched to batch statistics:",
    [n for n, _ in chosen][:3],
    "...",
)


def batch_statistics(module, args):
    module.training = True  # inference_on_dataset puts the model in eval mode first


for _, m in chosen:
    m.register_forward_pre_hook(batch_statistics)
    if hasattr(m, "momentum"):
        m.momentum = 0.0  # running averages untouched (only the batch statistics matter here)
dataset = cfg.DATASETS.TEST[0]
loader = NormActTrainer.build_test_loader(cfg, dataset)
evaluator = NormActTrainer.build_evaluator(cfg, dataset)
with torch.no_grad():
    result = inference_on_dataset(model, loader, evaluator)
print(parts, {k: round(v["AP"], 1) for k, v in result.items()})
