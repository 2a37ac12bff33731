"""Train a classifier with any norm-act layer: ImageNet, CIFAR-10, or the embedded digits.

    python -m classification.train                                  # digits demo, CPU
    python -m classification.train --model resnet50 --norm-act evonorm_b0 \\
        --data imagenet --data-dir /data/imagenet --output-dir runs/r50_b0
    torchrun --nproc_per_node 8 -m classification.train --model resnet50 ...   # DDP

Without ``--data`` the model trains on scikit-learn's digits (real, embedded, tiny) and
says so. Every epoch writes ``checkpoint.pt`` (``--resume`` continues it, LR schedule
included) and ``result.json``; TensorBoard scalars go to ``OUTPUT_DIR/tb``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from evonorm_core import list_norm_acts, norm_act_factory

from .anchors import ANCHOR_NAMES, ANCHORS, build_anchor
from .data import TensorImages, load_cifar10, load_digits_proxy, load_imagenet
from .models import MODEL_NAMES, MODEL_RESOLUTIONS, build_model
from .recipes import SCHEDULES, Recipe, recipe_for
from .trainer import Trainer

DATASETS = ("digits", "cifar10", "imagenet")
# The proxy task (paper section 5.1): SGD with LR 0.1 at batch 128, i.e. 0.2 per 256 images.
PROXY_RECIPE = Recipe(base_lr=0.2, schedule="cosine", batch_per_worker=128, workers=1, resolution=32,
                      epochs=30, warmup_epochs=0.0)


@dataclass
class TrainConfig:
    """Everything a run depends on; stored in every checkpoint and ``result.json``."""

    model: str = "resnet50_cifar"
    norm_act: str = "bn_relu"
    width_multiplier: float = 1.0
    groups: int | None = None
    sync_batch_stats: bool = False
    data: str = "digits"
    data_dir: str | None = None
    holdout_fraction: float = 0.0
    train_subset: int | None = None
    image_size: int | None = None
    batch_size: int | None = None
    epochs: float | None = None
    max_steps: int | None = None
    base_lr: float | None = None
    schedule: str | None = None
    warmup_epochs: float | None = None
    randaugment: bool = False
    seed: int = 0
    output_dir: str = "runs/classification"
    resume: bool = False
    num_workers: int = 4
    log_every: int = 10
    progress: bool = True


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(
        prog="python -m classification.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="resnet50_cifar", choices=MODEL_NAMES + ANCHOR_NAMES,
                   help="ImageNet model or CIFAR anchor (default: resnet50_cifar)")
    p.add_argument("--norm-act", default="bn_relu", help=f"norm-act layer, one of: {', '.join(list_norm_acts())}")
    p.add_argument("--width-multiplier", type=float, default=1.0,
                   help="extra channel multiplier on the model (Fig. 11 uses 0.9/1.0/1.1 for mobilenetv2)")
    p.add_argument("--groups", type=int, default=None, help="groups of grouped layers (default: 32, as the paper)")
    p.add_argument("--sync-batch-stats", action="store_true",
                   help="all-reduce batch statistics across DDP workers (BN, B series); default: per worker")
    p.add_argument("--data", default=None, choices=DATASETS,
                   help="dataset (default: digits, the embedded scikit-learn proxy; imagenet/cifar10 need --data-dir)")
    p.add_argument("--data-dir", default=None, help="dataset folder: ImageNet train/ val/ folders, or CIFAR-10's parent")
    p.add_argument("--holdout-fraction", type=float, default=0.0,
                   help="evaluate on this seeded fraction of ImageNet-train instead of val (reranking uses 0.1)")
    p.add_argument("--train-subset", type=int, default=None,
                   help="train on only the first N training images (quick checks; not for results)")
    p.add_argument("--image-size", type=int, default=None,
                   help="training/eval resolution (default: the model's, 32 for anchors/digits)")
    p.add_argument("--batch-size", type=int, default=None, help="images per worker (default: the recipe's)")
    p.add_argument("--epochs", type=float, default=None, help="training epochs (default: the recipe's)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (schedule still spans --epochs)")
    p.add_argument("--base-lr", type=float, default=None,
                   help="LR per 256 images, scaled linearly with the total batch (default: the recipe's)")
    p.add_argument("--schedule", default=None, choices=SCHEDULES, help="LR schedule (default: the recipe's)")
    p.add_argument("--warmup-epochs", type=float, default=None, help="linear warmup length (default: the recipe's)")
    p.add_argument("--randaugment", action="store_true", help="RandAugment (2 ops, magnitude 9), Tables 10-12")
    p.add_argument("--seed", type=int, default=0, help="seed for init, data order and augmentation")
    p.add_argument("--output-dir", default="runs/classification", help="checkpoint, result.json and TensorBoard folder")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint.pt if it exists")
    p.add_argument("--num-workers", type=int, default=4, help="data loader processes for ImageNet")
    p.add_argument("--log-every", type=int, default=10, help="steps between TensorBoard scalars")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    args = vars(p.parse_args(argv))
    if args["data"] is None:
        args["data"] = "digits"
        if os.environ.get("RANK", "0") == "0":
            print("no --data given: training on the embedded digits proxy (sklearn load_digits, 1,797 images)")
    return TrainConfig(**args)


def resolve_recipe(config: TrainConfig, probe_layer: nn.Module) -> Recipe:
    """The recipe for this run: the paper's (ImageNet models) or the proxy task's (anchors), then CLI overrides."""
    base = recipe_for(config.model, probe_layer) if config.model in MODEL_NAMES else PROXY_RECIPE
    overrides = {"base_lr": config.base_lr, "schedule": config.schedule, "epochs": config.epochs,
                 "warmup_epochs": config.warmup_epochs, "batch_per_worker": config.batch_size}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if config.randaugment:
        overrides["randaugment"] = True
    return dataclasses.replace(base, **overrides)


def build_datasets(config: TrainConfig, resolution: int) -> tuple[Dataset, Dataset, int]:
    """``(train, val, num_classes)`` for ``config.data``."""
    if config.data == "imagenet":
        if not config.data_dir:
            raise ValueError("--data imagenet needs --data-dir pointing at a folder with train/ and val/")
        train, val = load_imagenet(config.data_dir, resolution, config.randaugment, config.holdout_fraction, config.seed)
        return train, val, 1000
    if config.data == "cifar10":
        if not config.data_dir:
            raise ValueError("--data cifar10 needs --data-dir pointing at the folder holding cifar-10-batches-py/")
        train_x, train_y, val_x, val_y = load_cifar10(config.data_dir)
        crop = 24 if resolution == 32 else None  # the proxy task's 24x24 random crops
        return TensorImages(train_x, train_y, crop=crop, flip=True), TensorImages(val_x, val_y), 10
    train_x, train_y, val_x, val_y = load_digits_proxy(resolution)
    return TensorImages(train_x, train_y), TensorImages(val_x, val_y), 10


class Distributed:
    """The process's place in a ``torchrun`` job (single process when not launched by it)."""

    def __init__(self) -> None:
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over all processes."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            dist.all_reduce(tensor)
        return tensor.tolist()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, env: Distributed) -> dict[str, float]:
    """Top-1 accuracy (%) and mean loss over this process's shard, summed over processes."""
    model.eval()
    correct = loss = count = 0.0
    for images, labels in loader:
        images, labels = images.to(env.device, non_blocking=True), labels.to(env.device, non_blocking=True)
        logits = model(images)
        loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        count += labels.numel()
    model.train()
    correct, loss, count = env.sum([correct, loss, count])
    return {"top1": 100.0 * correct / max(count, 1), "loss": loss / max(count, 1)}


def save_checkpoint(path: Path, state: dict) -> None:
    """Write atomically, so an interrupted save never leaves a truncated checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


@dataclass
class TrainingSetup:
    """What :func:`train` works with, built from a :class:`TrainConfig`."""

    model: nn.Module
    recipe: Recipe
    sampler: DistributedSampler
    train_loader: DataLoader
    val_loader: DataLoader
    trainer: Trainer


def build(config: TrainConfig, env: Distributed) -> TrainingSetup:
    """Model, recipe, data loaders, optimizer and scheduler for ``config``."""
    options = {} if config.groups is None else {"groups": config.groups}
    if config.sync_batch_stats:
        options["sync"] = True
    make = norm_act_factory(config.norm_act, **options)
    recipe = resolve_recipe(config, make(32, True))
    resolution = config.image_size or (32 if config.model in ANCHORS or config.data != "imagenet"
                                       else MODEL_RESOLUTIONS[config.model])
    train_set, val_set, num_classes = build_datasets(config, resolution)
    if config.train_subset is not None:
        if not 0 < config.train_subset <= len(train_set):
            raise ValueError(f"--train-subset must be in 1..{len(train_set)}, got {config.train_subset}")
        train_set = Subset(train_set, range(config.train_subset))
    if config.model in ANCHORS:
        if config.width_multiplier != 1.0:
            raise ValueError("--width-multiplier is fixed by the paper for anchors; use the ImageNet model name")
        model = build_anchor(config.model, make, num_classes)
    else:
        model = build_model(config.model, make, num_classes, width_multiplier=config.width_multiplier)
    model.to(env.device)
    total_batch = recipe.batch_per_worker * env.world_size
    sampler = DistributedSampler(train_set, env.world_size, env.rank, shuffle=True, seed=config.seed, drop_last=True)
    workers = config.num_workers if config.data == "imagenet" else 0
    train_loader = DataLoader(train_set, recipe.batch_per_worker, sampler=sampler, drop_last=True,
                              num_workers=workers, pin_memory=env.device.type == "cuda", persistent_workers=workers > 0)
    if len(train_loader) == 0:
        raise ValueError(f"batch size {recipe.batch_per_worker} x {env.world_size} workers exceeds the "
                         f"{len(train_set)} training images")
    val_shard = Subset(val_set, range(env.rank, len(val_set), env.world_size))
    val_loader = DataLoader(val_shard, max(recipe.batch_per_worker, 256), num_workers=workers)
    module = nn.parallel.DistributedDataParallel(model) if env.world_size > 1 else model
    trainer = Trainer(model, recipe, total_batch, len(train_loader), module=module)
    return TrainingSetup(model, recipe, sampler, train_loader, val_loader, trainer)


def train(config: TrainConfig) -> dict:
    """Run (or resume) one training run; returns the final metrics written to ``result.json``."""
    env = Distributed()
    seed_everything(config.seed + env.rank)
    setup = build(config, env)
    model, recipe, trainer = setup.model, setup.recipe, setup.trainer
    train_loader, val_loader = setup.train_loader, setup.val_loader
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    start_epoch, step, history = 0, 0, []
    if config.resume and ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=env.device, weights_only=False)
        model.load_state_dict(state["model"])
        trainer.load_state_dict(state["trainer"])
        start_epoch, step, history = state["epoch"], state["step"], state["history"]
        torch.set_rng_state(state["rng"])
        if env.is_main:
            print(f"resumed {ckpt_path} at epoch {start_epoch}, step {step}")
    writer = _summary_writer(out) if env.is_main else None
    num_epochs = int(np.ceil(recipe.epochs))
    total_steps = min(num_epochs * len(train_loader), config.max_steps or float("inf"))
    bar = _progress(env.is_main and config.progress, total_steps, step)
    start, first_step = time.time(), step
    for epoch in range(start_epoch, num_epochs):
        if step >= total_steps:
            break
        setup.sampler.set_epoch(epoch)
        for images, labels in train_loader:
            images, labels = images.to(env.device, non_blocking=True), labels.to(env.device, non_blocking=True)
            loss = trainer.step(images, labels)
            step += 1
            if not np.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step} ({config.norm_act}, {config.model})")
            if writer and step % config.log_every == 0:
                writer.add_scalar("train/loss", loss, step)
                writer.add_scalar("train/lr", trainer.lr, step)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", img_s=_rate((step - first_step) * labels.numel() * env.world_size, start))
            if step >= total_steps:
                break
        metrics = evaluate(trainer.module, val_loader, env)
        history.append({"epoch": epoch + 1, "step": step, **metrics})
        if env.is_main:
            if writer:
                writer.add_scalar("val/top1", metrics["top1"], step)
                writer.add_scalar("val/loss", metrics["loss"], step)
            save_checkpoint(ckpt_path, {"model": model.state_dict(), "trainer": trainer.state_dict(),
                                        "epoch": epoch + 1, "step": step,
                                        "history": history, "rng": torch.get_rng_state(),
                                        "config": dataclasses.asdict(config)})
    if bar is not None:
        bar.close()
    result = {"config": dataclasses.asdict(config), "recipe": dataclasses.asdict(recipe), "steps": step,
              "world_size": env.world_size, "history": history,
              "final_top1": history[-1]["top1"] if history else None,
              "best_top1": max((h["top1"] for h in history), default=None)}
    if env.is_main:
        (out / "result.json").write_text(json.dumps(result, indent=1))
        if writer:
            writer.close()
    return result


def _summary_writer(out: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tb"))


def _rate(images: int, start: float) -> str:
    return f"{images / max(time.time() - start, 1e-9):.0f}"


def _progress(enabled: bool, total: int, initial: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    try:
        result = train(config)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from None
    if Distributed().is_main:
        print(f"final top-1 {result['final_top1']:.2f}% after {result['steps']} steps -> {config.output_dir}/result.json")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
