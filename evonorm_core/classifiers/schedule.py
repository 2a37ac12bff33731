"""Learning-rate schedules in optimizer steps: linear warmup, then multi-step, cosine, polynomial or constant.

A :class:`ScheduleSettings` is written in steps; a caller that thinks in epochs (the paper's
classification recipes) converts once, with its steps per epoch. :class:`ScheduleLR` applies
it per step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCHEDULES = ("multistep", "cosine", "polynomial", "constant")


@dataclass(frozen=True)
class ScheduleSettings:
    """The factor on the peak learning rate over ``total_steps`` optimizer steps.

    ``kind`` is one of :data:`SCHEDULES`; ``warmup_steps`` rise linearly from 0 to 1;
    ``milestones`` are the steps at which ``multistep`` decays 10x; ``poly_power`` is the
    ``polynomial`` decay's power. The decay spans the whole ``total_steps``, warmup included
    (Goyal et al., 2017).
    """

    kind: str
    total_steps: float
    warmup_steps: float = 0.0
    milestones: tuple[float, ...] = ()
    poly_power: float = 2.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r}; accepted: {', '.join(SCHEDULES)}")
        if not self.total_steps > 0 or not self.warmup_steps >= 0:
            raise ValueError(f"total_steps must be positive and warmup_steps >= 0, got {self.total_steps!r} and "
                             f"{self.warmup_steps!r}")

    def multiplier(self, step: float) -> float:
        """The factor on the peak learning rate at ``step`` (0 before the first update)."""
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return step / self.warmup_steps
        progress = min(step / self.total_steps, 1.0)
        if self.kind == "multistep":
            return 0.1 ** sum(step >= m for m in self.milestones)
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if self.kind == "polynomial":
            return (1.0 - progress) ** self.poly_power
        return 1.0


class ScheduleLR(torch.optim.lr_scheduler.LambdaLR):
    """A per-step scheduler following :meth:`ScheduleSettings.multiplier`.

    Its ``state_dict`` holds plain data only (the step count and LRs), so checkpoints load
    with ``weights_only=True``; the settings themselves are rebuilt from the run's configuration.
    (A lambda, not the bound method: ``LambdaLR`` saves the ``__dict__`` of anything that is
    not a plain function.)
    """

    def __init__(self, optimizer: torch.optim.Optimizer, settings: ScheduleSettings) -> None:
        super().__init__(optimizer, lambda step: settings.multiplier(step))
