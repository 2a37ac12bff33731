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

``Trainer(..., workers=W)`` simulates W data-parallel workers in one process (ghost batches,
the paper's "images per worker" of Table 3 without W machines). A non-finite loss is reported
by :meth:`Trainer.step` (it returns it and skips the update) instead of being raised from deep
inside autograd; :func:`evaluate` gives accuracy and mean
loss, optionally after recomputing moving averages (:func:`evonorm_core.running_stats.recalibrate`).
"""
from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..running_stats import batch_statistics_layers, recalibrate
from .optimizer import OptimizerSettings, build_optimizer
from .schedule import ScheduleLR, ScheduleSettings


class Trainer:
    """Training of ``model`` with ``optimizer`` under the per-step ``schedule``.

    ``label_smoothing`` is the cross-entropy's; ``module`` is what runs forward (e.g. the DDP
    wrapper of ``model``).

    ``workers`` simulates that many data-parallel workers (ghost batches): every training batch
    is split into ``workers`` equal consecutive parts, each run through ``module`` on its own,
    so that every batch-statistics layer normalizes a worker's images with that worker's
    statistics, as the paper's workers do; the loss is the mean over the whole batch and one
    backward gives the gradient the workers would all-reduce (the mean of their gradients).
    Moving averages are updated once per worker, in worker order, with the layer's momentum:
    an average over the latest worker batches instead of one worker's latest batches, with
    the same expected value (each is an average of per-worker statistics). A model without
    batch statistics computes the same thing in one pass, and takes it. Ghost batches call
    ``module`` several times before one backward: not for a DDP wrapper (one worker per process
    there).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSettings,
        schedule: ScheduleSettings,
        label_smoothing: float = 0.0,
        module: nn.Module | None = None,
        workers: int = 1,
    ) -> None:
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self.model, self.module, self.label_smoothing = model, module or model, label_smoothing
        self.workers = workers
        self.ghost_batches = workers > 1 and bool(batch_statistics_layers(model))
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
        loss = self.loss(images, labels)
        value = loss.item()
        if not math.isfinite(value):
            return value
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.steps += 1
        return value

    def loss(self, images: Tensor, labels: Tensor) -> Tensor:
        """The cross-entropy over the whole batch, each worker's images run through the model on their own."""
        if len(images) % self.workers:
            raise ValueError(f"a batch of {len(images)} images does not split into {self.workers} workers: "
                             f"give a multiple of {self.workers}")
        if self.ghost_batches:
            logits = torch.cat([self.module(part) for part in images.chunk(self.workers)])
        else:
            logits = self.module(images)
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)

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
        h, w = images.shape[-2:]
        if crop is not None and not 0 < crop <= min(h, w):
            raise ValueError(f"crop must be in 1..{min(h, w)} (the images are {h} x {w}), got {crop!r}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size!r}")
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.crop = None if crop is None or crop == h == w else crop
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
