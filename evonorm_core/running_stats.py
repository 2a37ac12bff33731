"""Moving averages of batch statistics: the one update rule, reset and recalibration.

Every layer with batch statistics (BatchNorm, the EvoNorm-B series, the "RS + rej" layer,
batch aggregations of a searched layer) keeps per-channel moving averages that replace the
batch's statistics in eval mode. They follow ``nn.BatchNorm2d``:

.. math::
    \\hat{r} \\leftarrow (1 - f)\\, \\hat{r} + f\\, r_{batch},
    \\qquad f = \\text{momentum} \\text{ or } 1 / \\text{num\\_batches\\_tracked} \\text{ (momentum=None)}

with variances stored unbiased (times ``n / (n - 1)``, ``n`` the elements per channel).
A training step counts its batch with :func:`count_batch_` (which returns ``f``) and folds
each statistic in with :func:`update_running_`; an empty batch is neither counted nor
folded in (the averages stay as they are). :func:`recalibrate` recomputes the averages for
fixed weights (BigGAN's "standing statistics", the search proxy's recalibration after very
short training).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn


def check_momentum(momentum: float | None) -> float | None:
    """``momentum`` as a float in (0, 1], or None (a cumulative average); ``ValueError`` otherwise."""
    if momentum is None:
        return None
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 < momentum <= 1:
        raise ValueError(f"momentum must be in (0, 1] or None (cumulative average), got {momentum!r}")
    return float(momentum)


def momentum_factor(momentum: float | None, num_batches_tracked: Tensor | int | None) -> float:
    """The weight ``f`` of the current batch: ``momentum``, or ``1 / num_batches_tracked``
    (a cumulative average) when ``momentum`` is None. Call it after counting the batch."""
    if momentum is not None:
        return float(momentum)
    tracked = int(num_batches_tracked) if num_batches_tracked is not None else 1
    return 1.0 / max(tracked, 1)


# The updates below need no torch.no_grad(): the buffers do not require grad and the batch values are
# detached, so autograd records nothing (and entering no_grad costs a batch-2 layer's call ~5 us).


def count_batch_(num_batches_tracked: Tensor | None, momentum: float | None) -> float:
    """Count one (non-empty) training batch in ``num_batches_tracked`` (if given) and return
    its weight :func:`momentum_factor` for :func:`update_running_`."""
    if num_batches_tracked is not None:
        num_batches_tracked.add_(1)
    return momentum_factor(momentum, num_batches_tracked)


def update_running_(running: Tensor, batch_value: Tensor, factor: float, count: int | None = None) -> None:
    """``running <- (1 - factor) running + factor batch_value`` in place.

    ``count``: the number of elements the batch variance ``batch_value`` was taken over; the
    variance is then stored unbiased (``* count / (count - 1)``), as ``nn.BatchNorm2d`` does.
    """
    value, alpha = batch_value.detach(), factor
    if isinstance(count, Tensor):  # a traced size: scale the value, not the float alpha
        value = value * (count / (count - 1)) if count > 1 else value
    elif count is not None and count > 1:
        alpha = factor * count / (count - 1)  # in the alpha: no tensor of scaled values (one call less)
    running.mul_(1 - factor).add_(value, alpha=alpha)


def is_batch_statistics_layer(module: nn.Module) -> bool:
    """Whether ``module`` itself (not its children) keeps moving averages of batch statistics:
    a layer of the suite declaring ``uses_batch_statistics``, or a native ``nn.BatchNorm*`` that
    tracks running statistics."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return bool(module.track_running_stats)
    return getattr(module, "uses_batch_statistics", False) is True


def batch_statistics_layers(model: nn.Module) -> list[nn.Module]:
    """The submodules of ``model`` (itself included) that keep moving averages of batch statistics."""
    return [m for m in model.modules() if is_batch_statistics_layer(m)]


def recalibrate(
    model: nn.Module, batches: Iterable[Any], forward: Callable[[nn.Module, Any], Any] | None = None
) -> int:
    """Recompute every moving average of ``model`` as the plain average over ``batches``.

    Each batch-statistics layer is reset and set to a cumulative average (``momentum=None``);
    only those layers run in train mode (so e.g. dropout and spectral-norm power iterations
    stay as in eval), the model is run on every batch with ``forward(model, batch)`` (default
    ``model(batch)``), then modes and momenta are restored. Returns the number of layers
    recalibrated (0: the model has no batch statistics and nothing is run).
    """
    with torch.no_grad():
        return _recalibrate(model, batches, forward or (lambda m, batch: m(batch)))


def _recalibrate(model: nn.Module, batches: Iterable[Any], forward: Callable[[nn.Module, Any], Any]) -> int:
    layers = batch_statistics_layers(model)
    if not layers:
        return 0
    modes = {m: m.training for m in model.modules()}
    momenta = [layer.momentum for layer in layers]
    model.eval()
    for layer in layers:
        layer.reset_running_stats()
        layer.momentum = None
        layer.train()
    try:
        for batch in batches:
            forward(model, batch)
    finally:
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum
        for module, mode in modes.items():
            module.training = mode
    return len(layers)

