"""Exponential moving average of the generator's weights (BigGAN's ``G_ema``)."""
from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    """Keeps ``average = decay * average + (1 - decay) * weights`` for a model's parameters.

    Before step ``start`` the average is a plain copy (BigGAN's ``ema_start``). Buffers
    (running statistics, spectral-norm power-iteration vectors) are copied, not averaged:
    the averaged model's own statistics come from :func:`evonorm_suite.gan.sampling.standing_statistics`.
    """

    def __init__(self, model: nn.Module, decay: float = 0.9999, start: int = 0) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay!r}")
        self.decay = decay
        self.start = start
        self.model = copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        decay = self.decay if step >= self.start else 0.0
        for average, current in zip(self.model.parameters(), model.parameters()):
            average.lerp_(current, 1 - decay)
        for average, current in zip(self.model.buffers(), model.buffers()):
            average.copy_(current)
