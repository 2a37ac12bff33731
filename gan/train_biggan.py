"""Train BigGAN-deep with a chosen generator norm-act (paper Table 5).

    python gan/train_biggan.py                               # built-in CPU demo (digits)
    python gan/train_biggan.py --norm evonorm_s0 --dataset imagenet --data-root /data/imagenet/train
    torchrun --nproc_per_node 8 gan/train_biggan.py --norm evonorm_b0 --dataset array --data-root I128.hdf5 --seeds 3

Without ``--dataset`` it trains a small model on scikit-learn's digits (real data shipped
on disk) on the CPU in a few minutes and says so. ``--dataset imagenet``/``array``
selects the BigGAN-deep 128 preset of the paper, ``cifar10`` a 32x32 one; any flag
overrides the preset. Each seed gets ``RUN_DIR/seed<k>``; ``--resume`` continues from
its ``checkpoints/last.pt``.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from evonorm_core import list_norm_acts

from gan.config import PRESETS, TrainConfig, make_config
from gan.data import DATASETS, build_dataset
from gan.trainer import Trainer, init_distributed

PRESET_OF_DATASET = {"digits": "digits", "cifar10": "cifar10", "imagenet": "imagenet128", "array": "imagenet128"}


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with VALUE read as bool, int, float or str (``groups=16``, ``sync=true``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--norm-option takes KEY=VALUE, got {text!r}")
    lowered = value.lower()
    if lowered in ("true", "false"):
        return key, lowered == "true"
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--norm", default="bn_relu", help=f"generator norm-act; one of {', '.join(list_norm_acts())}")
    parser.add_argument("--norm-option", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                        help="option of the norm-act, repeatable (e.g. groups=16 for gn_relu, default 16; sync=true)")
    parser.add_argument("--dataset", choices=DATASETS, help="training data (default: digits, built in)")
    parser.add_argument("--data-root", help="dataset folder, or the .npz/.hdf5 file for --dataset array")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="base configuration (default: from --dataset)")
    parser.add_argument("--run-dir", help="output folder (default: runs/gan/<preset>_<norm>); seeds go to seed<k>/")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--seeds", type=int, default=1, help="train this many seeds one after another (Table 5: 3)")
    parser.add_argument("--resume", action="store_true", help="continue each seed from its checkpoints/last.pt")
    parser.add_argument("--resolution", type=int, choices=(32, 64, 128), help="image size")
    parser.add_argument("--channels", type=int, help="channel width multiplier of G and D (BigGAN's ch)")
    parser.add_argument("--batch-size", type=int, help="images per optimizer step over all processes (paper: 2048)")
    parser.add_argument("--micro-batch", type=int, help="images per forward pass and process (accumulation fills the rest)")
    parser.add_argument("--steps", type=int, dest="total_steps", help="number of G steps to train")
    parser.add_argument("--g-lr", type=float, help="generator learning rate (paper: 5e-5)")
    parser.add_argument("--d-lr", type=float, help="discriminator learning rate (paper: 2e-4)")
    parser.add_argument("--d-steps", type=int, help="D steps per G step (paper: 2)")
    parser.add_argument("--ema-decay", type=float, help="EMA decay of G's weights (0.9999)")
    parser.add_argument("--ema-start", type=int, help="step from which the EMA averages (before: copy)")
    parser.add_argument("--num-workers", type=int, help="data loader processes")
    parser.add_argument("--log-every", type=int, help="steps between progress lines and TensorBoard scalars")
    parser.add_argument("--sample-every", type=int, help="steps between PNG sample grids")
    parser.add_argument("--save-every", type=int, help="steps between checkpoints/last.pt updates")
    parser.add_argument("--keep-every", type=int, help="steps between kept snapshots step_N.pt (0: none)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    return parser


def config_from_args(args: argparse.Namespace) -> tuple[str, TrainConfig]:
    dataset = args.dataset or "digits"
    preset = args.preset or PRESET_OF_DATASET[dataset]
    overrides = {
        key: getattr(args, key)
        for key in ("data_root", "resolution", "channels", "batch_size", "micro_batch", "total_steps", "g_lr",
                    "d_lr", "d_steps", "ema_decay", "ema_start", "num_workers", "log_every", "sample_every",
                    "save_every", "keep_every")
    }
    config = make_config(preset, dataset=dataset, norm=args.norm, norm_options=dict(args.norm_option), **overrides)
    return preset, config


def train_seed(config: TrainConfig, run_dir: str, resume: bool) -> None:
    ctx = init_distributed()
    if not resume and os.path.isfile(os.path.join(run_dir, "checkpoints", "last.pt")):
        raise SystemExit(f"{run_dir} already has a checkpoint; pass --resume to continue it or another --run-dir")
    trainer = Trainer(config, build_dataset(config.dataset, config.data_root, config.resolution), run_dir, ctx)
    if resume and trainer.resume():
        print(f"resumed {run_dir} at step {trainer.step}", flush=True)
    if ctx.is_main:
        params = sum(p.numel() for p in trainer.generator.parameters()) / 1e6
        print(f"{run_dir}: G {params:.2f}M params, norm {config.norm} {config.norm_options}, "
              f"{trainer.accumulation} micro-batch(es) of {config.micro_batch} per step", flush=True)
    trainer.train()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        preset, config = config_from_args(args)
    except (ValueError, KeyError) as error:
        raise SystemExit(f"error: {error}") from None
    if args.dataset is None:
        print("no --dataset given: training the built-in demo on scikit-learn's digits (real 8x8 digits, "
              "upsampled to 32x32) on the CPU; use --dataset imagenet --data-root PATH for the paper setting",
              flush=True)
    run_root = args.run_dir or os.path.join("runs", "gan", f"{preset}_{config.norm}")
    for seed in range(args.seed, args.seed + args.seeds):
        config.seed = seed
        try:
            train_seed(config, os.path.join(run_root, f"seed{seed}"), args.resume)
        except (ValueError, FileNotFoundError) as error:
            raise SystemExit(f"error: {error}") from None
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
