"""Probe (not a result): a trained detector's training losses on training batches with its batch-statistics
layers normalizing by batch statistics (as in training) and by their moving averages (as in evaluation).

    python probe_eval_loss.py RUN_DIR [BATCHES]
"""
import json
import sys

import torch
from detectron2.utils.events import EventStorage
from trained_run import load_trained

from evonorm_core import running_stats
from evonorm_suite.detection.trainer import NormActTrainer

run, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
torch.manual_seed(0)
cfg, model = load_trained(run, "/tmp/probe/out")
layers = [m for _, m in model.named_modules() if running_stats.is_batch_statistics_layer(m)]
for m in layers:
    if hasattr(m, "momentum"):
        m.momentum = 0.0  # moving averages untouched
loader = iter(NormActTrainer.build_train_loader(cfg))
data = [next(loader) for _ in range(batches)]


def losses(layers_training: bool) -> dict:
    model.train()
    for m in layers:
        m.train(layers_training)
    total: dict = {}
    with torch.no_grad(), EventStorage():
        for i, batch in enumerate(data):
            torch.manual_seed(i)  # the same proposal sampling both ways
            for k, v in model(batch).items():
                total[k] = total.get(k, 0.0) + v.item() / len(data)
    total["total"] = sum(total.values())
    return {k: round(v, 4) for k, v in total.items()}


result = {"run": run, "batch_statistics_layers": len(layers), "batches": batches,
          "batch_statistics": losses(True), "moving_averages": losses(False)}
print(json.dumps(result))
