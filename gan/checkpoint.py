"""Run directories and checkpoints.

A run directory holds ``config.json``, ``checkpoints/last.pt`` (everything needed to
resume), snapshots named by step (``checkpoints/step_0005000.pt``), ``samples/*.png``,
``tb/`` (TensorBoard) and, after evaluation, ``metrics.json``.
"""
from __future__ import annotations

import os

import torch

from .biggan_deep import Discriminator, Generator, GeneratorSpec
from .config import TrainConfig

LAST = "last.pt"


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def save_atomic(state: dict, path: str) -> None:
    """``torch.save`` to a temporary file, then rename, so a crash never leaves half a checkpoint."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def build_generator(config: TrainConfig, num_classes: int) -> Generator:
    spec = GeneratorSpec(
        resolution=config.resolution,
        channels=config.channels,
        num_classes=num_classes,
        dim_z=config.dim_z,
        shared_dim=config.shared_dim,
        depth=config.depth,
        attention=tuple(config.attention),
    )
    return Generator(spec, config.norm, **config.norm_options)


def build_discriminator(config: TrainConfig, num_classes: int) -> Discriminator:
    return Discriminator(config.resolution, config.channels, num_classes, config.depth, tuple(config.attention))


def resolve_checkpoint(run_dir: str, checkpoint: str | None = None) -> str:
    """``checkpoint`` if given, else the run's ``last.pt``; ``FileNotFoundError`` naming what is missing."""
    path = checkpoint or os.path.join(checkpoint_dir(run_dir), LAST)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path!r} (train first, or pass an existing checkpoint)")
    return path


def load_checkpoint(path: str) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def load_ema_generator(run_dir: str, checkpoint: str | None = None) -> tuple[Generator, TrainConfig, dict]:
    """The EMA generator of a run (eval mode), its config and the checkpoint's metadata."""
    state = load_checkpoint(resolve_checkpoint(run_dir, checkpoint))
    config = TrainConfig.from_dict(state["config"])
    generator = build_generator(config, state["num_classes"])
    generator.load_state_dict(state["G_ema"])
    meta = {"step": state["step"], "num_classes": state["num_classes"]}
    return generator.eval(), config, meta
