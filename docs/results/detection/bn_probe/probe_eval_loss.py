"""Probe (not a result): a trained detector's training losses on training batches with its batch-statistics
layers normalizing by batch statistics (as in training) and by their moving averages (as in evaluation).

    python probe_eval_loss.py RUN_DIR [BATCHES]
"""
import json
import sys

import torch
from detectron2.utils.events import EventStorage

from evonorm_core import running_stats
from evonorm_suite.detection import load_config
from evonorm_suite.detection.checkpoint import SafeCheckpointer
from evonorm_suite.detection.data import prepare_datasets
from evonorm_suite.detection.trainer import NormActTrainer

run, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
torch.set_num_threads(1)
torch.manual_seed(0)
cfg = load_config(f"{run}/config.yaml", ["MODEL.WEIGHTS", f"{run}/model_final.pth", "OUTPUT_DIR", "/tmp/probe/out"])
cfg.freeze()
prepare_datasets(cfg)
model = NormActTrainer.build_model(cfg)
SafeCheckpointer(model).load(cfg.MODEL.WEIGHTS)
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
