"""The one training loop of the suite's classifiers: an optimizer, a per-step schedule, a step.

:class:`Trainer` takes its optimizer as :class:`~evonorm_core.classifiers.optimizer.OptimizerSettings`
(absolute peak learning rate, weight decay on convolution and linear weights only) and its
schedule as :class:`~evonorm_core.classifiers.schedule.ScheduleSettings` (in optimizer steps,
warmup and milestones included), plus the loss's label smoothing. Callers convert their own
units once and feed it batches:

* the classification launcher from DataLoaders (ImageNet, CIFAR-10, digits), under DDP, with
  its paper recipe converted to these settings;
* the layer search's proxy task from :class:`TensorBatches`, in-memory images with vectorised
  random crops, stopping after the quality steps and continuing to the fitness steps.

A non-finite loss is reported by :meth:`Trainer.step` (it returns it and skips the update)
instead of being raised from deep inside autograd; :func:`evaluate` gives accuracy and mean
loss, optionally after recomputing moving averages (:func:`evonorm_core.running_stats.recalibrate`).
"""
from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..running_stats import recalibrate
from .optimizer import OptimizerSettings, build_optimizer
from .schedule import ScheduleLR, ScheduleSettings


class Trainer:
    """Training of ``model`` with ``optimizer`` under the per-step ``schedule``.

    ``label_smoothing`` is the cross-entropy's; ``module`` is what runs forward (e.g. the DDP
    wrapper of ``model``).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSettings,
        schedule: ScheduleSettings,
        label_smoothing: float = 0.0,
        module: nn.Module | None = None,
    ) -> None:
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
        self.model, self.module, self.label_smoothing = model, module or model, label_smoothing
        self.optimizer = build_optimizer(model, optimizer)
        self.scheduler = ScheduleLR(self.optimizer, schedule)
        self.steps = 0

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def step(self, images: Tensor, labels: Tensor) -> float:
        """One optimizer step on a batch; returns the loss. A non-finite loss is returned
        without updating anything (the caller decides: a diverged run, a rejected layer)."""
        self.model.train()
        loss = F.cross_entropy(self.module(images), labels, label_smoothing=self.label_smoothing)
        value = loss.item()
        if not math.isfinite(value):
            return value
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.steps += 1
        return value

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])


class TensorBatches:
    """Endless random training batches from in-memory images, with random crops and flips.

    Each batch draws ``batch_size`` indices with replacement from ``generator``; crops of
    ``crop`` x ``crop`` (``None``: the full image) and horizontal flips (``flip``) are drawn
    per image and applied with one gather, no per-image Python loop.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int,
        crop: int | None = None,
        flip: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        size = images.shape[-1]
        if crop is not None and not 0 < crop <= size:
            raise ValueError(f"crop must be in 1..{size}, got {crop!r}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size!r}")
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.crop = None if crop in (None, size) else crop
        self.flip = flip
        self.generator = generator or torch.Generator().manual_seed(0)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        index = torch.randint(0, len(self.labels), (self.batch_size,), generator=self.generator)
        images = self.images[index]
        if self.crop is not None:
            images = random_crops(images, self.crop, self.generator)
        if self.flip:
            mirrored = torch.rand(self.batch_size, generator=self.generator) < 0.5
            images = torch.where(mirrored[:, None, None, None], images.flip(-1), images)
        return images, self.labels[index]


def random_crops(images: Tensor, size: int, generator: torch.Generator) -> Tensor:
    """One random ``size`` x ``size`` crop of each image of (N, C, H, W) ``images`` (one gather)."""
    n, c, h, w = images.shape
    top = torch.randint(0, h - size + 1, (n,), generator=generator)
    left = torch.randint(0, w - size + 1, (n,), generator=generator)
    steps = torch.arange(size)
    rows = (top[:, None] + steps)[:, None, :, None].expand(n, c, size, w)
    images = images.gather(2, rows)
    cols = (left[:, None] + steps)[:, None, None, :].expand(n, c, size, size)
    return images.gather(3, cols)


def centre_crops(images: Tensor, size: int) -> Tensor:
    """The centre ``size`` x ``size`` crop of each image of (N, C, H, W) ``images`` (the lower-right
    one of the two middles when the margin is odd)."""
    top, left = (images.shape[-2] - size + 1) // 2, (images.shape[-1] - size + 1) // 2
    return images[..., top:top + size, left:left + size]


@torch.no_grad()
def evaluate(
    model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 512,
    recalibration_batches: list[Tensor] | None = None,
) -> dict[str, float]:
    """Top-1 accuracy (fraction) and mean cross-entropy of ``model`` in eval mode on in-memory
    images; with ``recalibration_batches`` the moving averages are first recomputed over them."""
    if recalibration_batches:
        recalibrate(model, recalibration_batches)
    was_training = model.training
    model.eval()
    correct = loss = 0.0
    for start in range(0, len(labels), batch_size):
        logits = model(images[start:start + batch_size])
        target = labels[start:start + batch_size]
        loss += F.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(1) == target).sum().item()
    model.train(was_training)
    count = max(len(labels), 1)
    return {"accuracy": correct / count, "loss": loss / count}
