"""Layers that evaluate a genome: :class:`GraphLayer`, and the channel-wise affine that
replaces a BatchNorm without activation during the search (paper footnote 3)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import functional, running_stats
from .. import statistics as stats
from ..layers.base import NormAct2d
from ..registry import NormActMaker
from .expression import to_infix
from .genome import INITIAL_NODES, INPUT, V0, V1, ZERO, Genome
from .primitives import PRIMITIVES

_BATCH_STAT_INIT = {"mean": 0.0, "var": 1.0, "mean_square": 1.0}
_BATCH_KINDS = {"batch_mean": "mean", "batch_std": "var", "batch_rms": "mean_square"}


class ChannelAffine2d(NormAct2d):
    """``x * gamma + beta`` per channel: what a BatchNorm with no activation after it
    becomes in the anchors during the search (footnote 3). ``nonlinearity`` is ignored."""

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = False,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity=False, eps=eps, affine=affine, device=device, dtype=dtype)

    def transform(self, x: Tensor) -> Tensor:
        return x

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        return functional.affine(self.check_input(x, weight, bias), weight, bias)

    def folded_affine(self) -> tuple[Tensor, Tensor]:
        return self._gamma_beta()


@torch.fx.wrap
def counted_batch(x: Tensor, num_batches_tracked: Tensor) -> Tensor:
    """``x`` itself, after counting it in ``num_batches_tracked`` unless it is empty."""
    if x.numel() > 0:
        with torch.no_grad():
            num_batches_tracked.add_(1)
    return x


@torch.fx.wrap
def batch_statistic(
    value: Tensor, kind: str, running: Tensor, num_batches_tracked: Tensor, training: bool, momentum: float | None
) -> Tensor:
    """Per-channel batch ``kind`` ('mean', 'var' or 'mean_square') of ``value``, shape (1, C, 1, 1).

    Training: of the batch, folded into ``running`` by :mod:`evonorm_core.running_stats`
    (the batch already counted in ``num_batches_tracked``; variances stored unbiased;
    nothing for an empty batch). Eval: ``running``.
    """
    if not training:
        return running.to(value.dtype).view(1, -1, 1, 1)
    mean, var, count = stats.batch_moments(value)
    stat = {"mean": mean, "var": var, "mean_square": var + mean.square()}[kind]
    if count > 0:
        factor = running_stats.momentum_factor(momentum, num_batches_tracked)
        running_stats.update_running_(running, stat, factor, count if kind == "var" else None)
    return stat.view(1, -1, 1, 1)


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
    (buffer ``running_<kind>_<node>``) that replaces the batch statistic in eval, updated
    by :mod:`evonorm_core.running_stats` as :class:`~torch.nn.BatchNorm2d` does with
    ``momentum`` (variances stored unbiased); ``momentum=None`` makes the averages
    cumulative (equal weight to every batch since the last :meth:`reset_running_stats`).
    Grouped ops use ``groups`` (``None``: 32 lowered until it divides ``num_channels``).
    """

    def __init__(
        self,
        genome: Genome,
        num_channels: int,
        *,
        eps: float = 1e-5,
        groups: int | None = None,
        momentum: float | None = 0.1,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity=True, eps=eps, affine=affine, device=device, dtype=dtype)
        self.momentum = running_stats.check_momentum(momentum)
        self.genome = genome
        self.groups = stats.resolve_groups(num_channels, groups)
        self._live = [i for i in genome.live_nodes() if i >= len(INITIAL_NODES)]
        live = set(genome.live_nodes())
        for index, name, init in ((V0, "v0", 0.0), (V1, "v1", 1.0)):
            if index in live:
                self.register_channel_param(name, init, device=device, dtype=dtype)
        self._running: dict[str, float] = {}  # buffer name -> initial value
        for index in self._live:
            kind = _BATCH_KINDS.get(genome.node(index).op)
            if kind is not None:
                name = f"running_{kind}_{index}"
                self._running[name] = _BATCH_STAT_INIT[kind]
                init = torch.full((num_channels,), _BATCH_STAT_INIT[kind], device=device, dtype=dtype)
                self.register_buffer(name, init)
        self._uses_batch_statistics = bool(self._running)
        if self._uses_batch_statistics:
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
        self._contexts = {index: _NodeContext(self, index) for index in self._live}

    @property
    def uses_batch_statistics(self) -> bool:
        """Whether a live node of the genome is a batch aggregation (moving averages in eval)."""
        return self._uses_batch_statistics

    def reset_running_stats(self) -> None:
        """Moving averages back to their initial values (mean 0, variance and mean square 1)."""
        with torch.no_grad():
            for name, init in self._running.items():
                getattr(self, name).fill_(init)
            if self._uses_batch_statistics:
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.reset_running_stats()

    def batch_statistic(self, index: int, kind: str, value: Tensor) -> Tensor:
        """Batch ``kind`` of node ``index``'s input ``value`` (the batch's in training,
        updating the moving average; the moving average in eval), shape (1, C, 1, 1)."""
        return batch_statistic(
            value, kind, getattr(self, f"running_{kind}_{index}"), self.num_batches_tracked, self.training,
            self.momentum,
        )

    def transform(self, x: Tensor) -> Tensor:
        if self.training and self._uses_batch_statistics:
            x = counted_batch(x, self.num_batches_tracked)
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
        return f"{super().extra_repr()}, groups={self.groups}, expression={to_infix(self.genome)!r}"


def genome_norm_act(genome: Genome, **options) -> NormActMaker:
    """A norm-act spec for the suite's models: a :class:`GraphLayer` where the model has
    BN + activation, a :class:`ChannelAffine2d` where it has a BN alone (footnote 3).
    ``options`` go to :class:`GraphLayer` (``eps``, ``groups``, ``momentum``, ``affine``,
    ``device``, ``dtype``). The maker's ``uses_batch_statistics`` says whether its layers (with
    nonlinearity) use batch statistics."""
    affine_options = {k: v for k, v in options.items() if k in ("eps", "affine", "device", "dtype")}

    def make(num_channels: int, nonlinearity: bool = True) -> nn.Module:
        if nonlinearity:
            return GraphLayer(genome, num_channels, **options)
        return ChannelAffine2d(num_channels, **affine_options)

    make.uses_batch_statistics = genome.uses_batch_statistics()
    return make
