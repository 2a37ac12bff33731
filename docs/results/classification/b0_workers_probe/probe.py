"""Why does EvoNorm-B0 collapse in Table 2's ResNet50-CIFAR setting (8 workers x 32 images, LR 0.1)?

Trains one cell of the grid (ResNet50-CIFAR, EvoNorm-B0 or another of Table 2's layers with ``--layer``, Table 2's
MiniScale setting, one thread as the grid does) with one thing changed, and prints its per-epoch validation loss and
top-1 beside the grid's run of the same seed:

* ``--impl reference``: every EvoNorm built with ``impl="reference"`` (the paper's formula as composed PyTorch ops,
  autograd's own backward) instead of the fused operators: the kernels or the formula?
* ``--workers W --images B --base-lr LR``: another step (W simulated workers of B images, LR per 256 images):
  the learning rate or the batch statistics' size?
* ``--warmup-epochs E``: a longer linear warmup (the grid's is 1 epoch, 15 steps at 8 x 32 images; Goyal et al.'s,
  which the paper follows, is 5 epochs, thousands of ImageNet steps)?

    python docs/results/classification/b0_workers_probe/probe.py 0 OUT --impl reference
    python docs/results/classification/b0_workers_probe/probe.py 0 OUT --workers 1 --images 128 --base-lr 0.2
    python docs/results/classification/b0_workers_probe/probe.py 0 OUT --layer BN-ReLU --base-lr 0.05
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from evonorm_core.layers import evonorm
from evonorm_suite.classification.paper_tables import TABLES
from evonorm_suite.classification.tables import LAYERS, Cell, MiniScale, mini_config, step_settings
from evonorm_suite.classification.train import train

GRID = Path("runs/reproduction/classification_mnist/table2")


def reference_only() -> None:
    """Every EvoNorm built from here on runs impl="reference", whatever its caller asks."""
    init = evonorm._EvoNorm._init_evonorm

    def forced(self, impl, device, dtype):
        init(self, "reference", device, dtype)

    evonorm._EvoNorm._init_evonorm = forced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seed", type=int, help="the grid's seed to rerun")
    parser.add_argument("out", type=Path, help="folder for the probe's run")
    parser.add_argument("--layer", choices=TABLES["table2"].row_labels("resnet50"), default="EvoNorm-B0",
                        help="the Table 2 row to train (default: EvoNorm-B0)")
    parser.add_argument("--impl", choices=("fused", "reference"), default="fused", help="the EvoNorms' impl")
    parser.add_argument("--workers", type=int, help="simulated workers (default: the grid's)")
    parser.add_argument("--images", type=int, help="images per worker (default: the grid's)")
    parser.add_argument("--base-lr", type=float, help="LR per 256 images (default: the grid's)")
    parser.add_argument("--warmup-epochs", type=float, help="epochs of linear warmup (default: the grid's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.impl == "reference":
        reference_only()
    config = mini_config(TABLES["table2"], Cell("resnet50", args.layer, None, args.seed), MiniScale(), args.out)
    changes = {"workers": args.workers, "batch_size": args.images, "base_lr": args.base_lr,
               "warmup_epochs": args.warmup_epochs}
    config = dataclasses.replace(config, output_dir=str(args.out / f"seed{args.seed}"), resume=False,
                                 **{k: v for k, v in changes.items() if v is not None})
    result = train(config)
    grid = json.loads((GRID / "resnet50" / LAYERS[args.layer] / "recipe" / f"seed{args.seed}" / "result.json").read_text())
    print(f"{args.layer}, seed {args.seed}, impl {args.impl}, {step_settings(config)}, warmup {config.warmup_epochs:g} epochs: "
          "epoch, validation loss / top-1: "
          "probe | the grid's run")
    for probe, ran in zip(result["history"], grid["history"]):
        print(f"  {probe['epoch']:2d}  {probe['loss']:10.3f} / {probe['top1']:5.1f} | "
              f"{ran['loss']:10.3f} / {ran['top1']:5.1f}")


if __name__ == "__main__":
    main()
