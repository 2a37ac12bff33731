"""Rejection tests (paper section 4.4) that need no training data.

* :func:`static_rejection`: the cheapest stage, run before any training: the output must
  depend on ``x`` and be finite, with finite gradients, on random input.
* :func:`worst_case_gradient_norm`: the stability test. The convolution weights are moved
  by gradient ascent on the norm of the loss gradient (``d ||d loss / d theta|| / d theta``)
  for up to ``steps`` steps; the largest norm seen is returned, stopping early once it
  passes ``threshold`` (paper: 100 steps, reject above 1e8).

The quality test (accuracy after N training steps on every anchor) lives with the proxy
task, in ``search/proxy.py``; every stage is declared in :mod:`.results`.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .equivalence import probe_outputs
from .genome import Genome
from .layer import GraphLayer


def static_rejection(genome: Genome) -> str | None:
    """Why ``genome`` fails the static checks, or ``None`` if it passes."""
    first, second, evaluated = probe_outputs(genome)
    if not all(torch.isfinite(out).all() for out in (first, second, evaluated)):
        return "non-finite output on random input"
    if torch.allclose(first, second, rtol=1e-6, atol=1e-9):  # same output for two different inputs
        return "output does not depend on x"
    x = torch.randn(4, 8, 3, 3, requires_grad=True)
    GraphLayer(genome, 8, groups=4)(x).square().sum().backward()
    if x.grad is not None and not torch.isfinite(x.grad).all():
        return "non-finite gradient on random input"
    return None


def conv_weights(model: nn.Module) -> list[Tensor]:
    """The weights of every convolution in ``model`` (the ``theta`` of the stability test)."""
    return [m.weight for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)]


def worst_case_gradient_norm(
    model: nn.Module,
    loss_fn: Callable[[Tensor], Tensor],
    steps: int = 100,
    lr: float = 0.01,
    threshold: float = 1e8,
) -> tuple[float, int]:
    """``(largest gradient norm seen, steps taken)`` under adversarial ascent of the conv weights.

    ``loss_fn(model)`` returns the training loss of ``model`` on a fixed batch. The conv
    weights are modified in place (pass a copy). A non-finite norm counts as infinite.
    """
    params = conv_weights(model)
    if not params:
        raise ValueError("the stability test needs a model with convolutions")
    worst, step = 0.0, 0
    for step in range(1, steps + 1):
        loss = loss_fn(model)
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        norm = torch.sqrt(sum(g.square().sum() for g in grads if g is not None) + torch.zeros(()))
        value = norm.item()
        worst = max(worst, value if math.isfinite(value) else math.inf)
        if worst > threshold:
            return worst, step
        if not norm.requires_grad:  # no conv weight influences the loss: nothing to ascend
            break
        ascent = torch.autograd.grad(norm, params, allow_unused=True)
        with torch.no_grad():
            for param, direction in zip(params, ascent):
                if direction is not None:
                    param.add_(direction, alpha=lr)
    return worst, step
