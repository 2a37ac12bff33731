"""The classifiers' optimizers: SGD with Nesterov momentum or RMSProp, at an absolute learning rate.

:class:`OptimizerSettings` is all a :class:`~evonorm_core.classifiers.trainer.Trainer` needs to
know about the optimizer: which one, its peak learning rate (the rate after warmup, in absolute
terms: a caller that thinks in "LR per 256 images" converts once, before) and the weight decay,
which :func:`build_optimizer` applies to convolution and linear weights only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

OPTIMIZERS = ("sgd", "rmsprop")


@dataclass(frozen=True)
class OptimizerSettings:
    """``name`` (one of :data:`OPTIMIZERS`), the peak ``lr`` and the ``weight_decay`` of conv/linear weights."""

    name: str = "sgd"
    lr: float = 0.1
    weight_decay: float = 1e-4

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.name!r}; accepted: {', '.join(OPTIMIZERS)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")


def build_optimizer(model: nn.Module, settings: OptimizerSettings) -> torch.optim.Optimizer:
    """SGD (Nesterov, momentum 0.9) or RMSProp (decay 0.9, momentum 0.9, eps 1e-3, EfficientNet's).

    Weight decay applies to convolution and linear weights only, not to the norm-act
    layers' per-channel vectors or biases.
    """
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if settings.name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=settings.lr, alpha=0.9, momentum=0.9, eps=1e-3)
    return torch.optim.SGD(groups, lr=settings.lr, momentum=0.9, nesterov=True)
