"""Layers that evaluate a genome: :class:`GraphLayer`, and the channel-wise affine that
replaces a BatchNorm without activation during the search (paper footnote 3)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .. import statistics as stats
from ..layers.base import NormAct2d
from .genome import INITIAL_NODES, INPUT, V0, V1, ZERO, Genome
from .primitives import PRIMITIVES

_BATCH_STAT_INIT = {"mean": 0.0, "var": 1.0, "mean_square": 1.0}


class ChannelAffine2d(NormAct2d):
    """``x * gamma + beta`` per channel: what a BatchNorm with no activation after it
    becomes in the anchors during the search (footnote 3). ``nonlinearity`` is ignored."""

    def __init__(self, num_channels: int, nonlinearity: bool = False, eps: float = 1e-5) -> None:
        super().__init__(num_channels, nonlinearity=False, eps=eps)

    def transform(self, x: Tensor) -> Tensor:
        return x


class _NodeContext:
    """The :class:`~.primitives.OpContext` of one node of a :class:`GraphLayer`."""

    def __init__(self, layer: "GraphLayer", index: int) -> None:
        self.layer, self.index = layer, index
        self.eps, self.groups = layer.eps, layer.groups

    def batch_statistic(self, kind: str, value: Tensor) -> Tensor:
        return self.layer.batch_statistic(self.index, kind, value)


class GraphLayer(NormAct2d):
    """A searched normalization-activation layer: ``graph(x) * gamma + beta``.

    Evaluates the live nodes of ``genome`` (dead ones are skipped) and ends with the
    channel-wise affine every custom layer is followed by (Fig. 5). ``v0``/``v1`` exist
    only when the graph reads them. Each batch aggregation node keeps a moving average
    (buffer ``running_<kind>_<node>``, updated as :class:`~torch.nn.BatchNorm2d` does with
    ``momentum``, variances stored unbiased) that replaces the batch statistic in eval.
    ``momentum=None`` makes the averages cumulative (equal weight to every batch since the
    last :meth:`reset_running_stats`), as in ``BatchNorm2d``. Grouped ops use ``groups``
    (``None``: 32 lowered until it divides ``num_channels``).
    """

    def __init__(
        self,
        genome: Genome,
        num_channels: int,
        eps: float = 1e-5,
        groups: int | None = None,
        momentum: float | None = 0.1,
    ) -> None:
        super().__init__(num_channels, nonlinearity=True, eps=eps)
        if momentum is not None and not 0 < momentum <= 1:
            raise ValueError(f"momentum must be in (0, 1] or None (cumulative), got {momentum!r}")
        self.genome = genome
        self.groups = stats.resolve_groups(num_channels, groups)
        self.momentum = momentum if momentum is None else float(momentum)
        self._live = [i for i in genome.live_nodes() if i >= len(INITIAL_NODES)]
        live = set(genome.live_nodes())
        for index, name, init in ((V0, "v0", 0.0), (V1, "v1", 1.0)):
            if index in live:
                self.register_channel_param(name, init)
        for index in self._live:
            kind = _batch_kind(genome.node(index).op)
            if kind is not None:
                self.register_buffer(f"running_{kind}_{index}", torch.full((num_channels,), _BATCH_STAT_INIT[kind]))
        if self.uses_batch_statistics:
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self._contexts = {index: _NodeContext(self, index) for index in self._live}

    @property
    def uses_batch_statistics(self) -> bool:
        return any(name.startswith("running_") for name, _ in self.named_buffers())

    def reset_running_stats(self) -> None:
        for name, buffer in self.named_buffers():
            if name.startswith("running_"):
                buffer.fill_(_BATCH_STAT_INIT[name.split("_", 1)[1].rsplit("_", 1)[0]])
        if self.uses_batch_statistics:
            self.num_batches_tracked.zero_()

    def batch_statistic(self, index: int, kind: str, value: Tensor) -> Tensor:
        """Batch ``kind`` of node ``index``'s input ``value`` (the batch's in training,
        updating the moving average; the moving average in eval), shape (1, C, 1, 1)."""
        running = getattr(self, f"running_{kind}_{index}")
        if self.training:
            mean, var, count = stats.batch_moments(value)
            stat = {"mean": mean, "var": var, "mean_square": var + mean.square()}[kind]
            with torch.no_grad():
                stored = var * (count / (count - 1)) if kind == "var" and count > 1 else stat
                weight = self.momentum if self.momentum is not None else 1.0 / (int(self.num_batches_tracked) + 1)
                running.lerp_(stored.to(running.dtype), weight)
        else:
            stat = running.to(value.dtype)
        return stat.view(1, -1, 1, 1)

    def transform(self, x: Tensor) -> Tensor:
        out = self._evaluate(x)
        if self.training and self.uses_batch_statistics:
            self.num_batches_tracked.add_(1)
        return out

    def _evaluate(self, x: Tensor) -> Tensor:
        values: dict[int, Tensor] = {INPUT: x, ZERO: x.new_zeros(1, 1, 1, 1)}
        for index, name in ((V0, "v0"), (V1, "v1")):
            if hasattr(self, name):
                values[index] = self.channel_param(name, x.dtype)
        for index in self._live:
            node = self.genome.node(index)
            op = PRIMITIVES[node.op]
            args = [values[i] for i in node.inputs]
            if op.aggregation:
                args = [a.expand_as(x) for a in args]
            values[index] = op.function(*args, self._contexts[index])
        return values[self.genome.output].expand_as(x)

    def extra_repr(self) -> str:
        from .expression import to_infix

        return f"{super().extra_repr()}, groups={self.groups}, expression={to_infix(self.genome)!r}"


def _batch_kind(op: str) -> str | None:
    if not PRIMITIVES[op].batch_dependent:
        return None
    return {"batch_mean": "mean", "batch_std": "var", "batch_rms": "mean_square"}[op]


def genome_norm_act(genome: Genome, **options) -> Callable[[int, bool], nn.Module]:
    """A norm-act spec for the suite's models: a :class:`GraphLayer` where the model has
    BN + activation, a :class:`ChannelAffine2d` where it has a BN alone (footnote 3).
    ``options`` go to :class:`GraphLayer` (``eps``, ``groups``, ``momentum``)."""

    def make(num_channels: int, nonlinearity: bool = True) -> nn.Module:
        if nonlinearity:
            return GraphLayer(genome, num_channels, **options)
        return ChannelAffine2d(num_channels, eps=options.get("eps", 1e-5))

    return make
