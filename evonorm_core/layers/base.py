"""What every normalization-activation layer in the suite shares.

A layer maps an NCHW tensor to one of the same shape and ends with the channel-wise
affine ``* gamma + beta`` (stored as ``weight`` and ``bias``, PyTorch's names; absent with
``affine=False``, as in PyTorch's norms). The ``nonlinearity`` flag follows the paper's
Appendix A: with it off, an EvoNorm reduces to the affine ``x * gamma + beta`` and a
baseline to its normalization without activation. Statistics are computed in float32
(float64 stays float64), so half-precision inputs, e.g. under autocast, are normalized
exactly and returned in their own dtype.

The contract (``NormAct2d``):

* ``layer(x) == layer.forward_affine(x, layer.weight, layer.bias)``; ``forward_affine``
  takes ``weight``/``bias`` ``None``, per channel ``(C,)`` or per sample ``(N, C)``
  (class-conditional layers), through the same (fused where the layer is fused) path.
* ``layer.uses_batch_statistics`` (instance) and ``type(layer).uses_batch_statistics_for(nonlinearity)``
  (class metadata, read without building a layer).
* ``layer.folded_affine()``: ``(scale, shift)`` when the layer, in its current mode, is a
  per-channel affine followed by :meth:`NormAct2d.activation_module` (inference folding).
* Bad inputs (wrong rank or channels, integer or complex dtypes) raise ``ValueError``;
  empty batches and empty maps give an empty output and leave moving averages untouched;
  ``forward`` can be traced by ``torch.fx.symbolic_trace`` (checks run inside
  ``torch.fx.wrap``-ped functions).
"""
from __future__ import annotations

import abc
from typing import ClassVar

import torch
from torch import Tensor, nn

from .. import formulas, functional, running_stats
from .. import statistics as stats


@torch.fx.wrap
def checked_input(x: Tensor, layer: str, num_channels: int, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """``x`` itself, after checking that it is a real floating-point NCHW tensor with
    ``num_channels`` channels and that ``weight``/``bias`` are None, (C,) or (N, C)."""
    functional.check_nchw(layer, x)
    if x.shape[1] != num_channels:
        raise ValueError(
            f"{layer} was built for {num_channels} channels, got input of shape {tuple(x.shape)} ({x.shape[1]} channels)"
        )
    functional.check_affine(layer, x, weight, bias)
    return x


def _relu(z: Tensor, param: Tensor | None) -> Tensor:
    return torch.relu(z)


def _max_v0(z: Tensor, v0: Tensor) -> Tensor:
    return torch.maximum(z, v0)


def _swish1(z: Tensor, param: Tensor | None) -> Tensor:
    return z * torch.sigmoid(z)


def _swish(z: Tensor, v1: Tensor) -> Tensor:
    return z * torch.sigmoid(v1 * z)


# name -> (function of (z, parameter), learnable per-channel parameter and its initial value)
ACTIVATIONS = {
    "relu": (_relu, None),
    "max_v0": (_max_v0, ("v0", 0.0)),  # max(z, v0): the "PReLU" of Table 2, FRN's TLU
    "swish1": (_swish1, None),  # z * sigmoid(z)
    "swish": (_swish, ("v1", 1.0)),  # z * sigmoid(v1 * z)
}


class ChannelActivation(nn.Module):
    """A layer's activation on its own (``max(z, v0)`` or ``z sigmoid(v1 z)`` with a fixed
    per-channel parameter): what remains of a layer after its affine is folded away."""

    def __init__(self, activation: str, parameter: Tensor) -> None:
        super().__init__()
        self.activation = activation
        self.register_buffer("parameter", parameter.detach().clone())

    def forward(self, z: Tensor) -> Tensor:
        return ACTIVATIONS[self.activation][0](z, self.parameter.to(z.dtype).view(1, -1, 1, 1))

    def extra_repr(self) -> str:
        return f"{self.activation}, num_channels={self.parameter.numel()}"


class NormAct2d(nn.Module, abc.ABC):
    """Base class: ``activate(transform(x) * gamma + beta)``.

    Subclasses implement :meth:`transform`, the part of the paper's expression in front of
    the affine (for an EvoNorm, the whole searched expression; for a baseline, its
    normalization), and override :meth:`forward_affine` where a fused or native kernel
    computes the whole layer. Baselines pass an ``activation`` from :data:`ACTIVATIONS`,
    applied after the affine as in BN-ReLU. ``gamma`` is :attr:`weight` (init 1), ``beta``
    is :attr:`bias` (init 0); extra per-channel parameters (``v0`` init 0, ``v1`` init 1)
    are made with :meth:`register_channel_param`.

    Args:
        num_channels: ``C`` of the NCHW input.
        nonlinearity: False where the replaced BatchNorm had no activation after it.
        eps: the ``epsilon`` of the formula (finite, positive).
        affine: with False there is no ``weight``/``bias`` (``gamma = 1``, ``beta = 0``).
        activation: a key of :data:`ACTIVATIONS` applied after the affine (baselines).
        device, dtype: where and in which dtype parameters and buffers are created.
    """

    #: Whether the layer (built with ``nonlinearity=True``) normalizes with batch statistics.
    batch_statistics: ClassVar[bool] = False

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        activation: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        functional.check_positive("num_channels", num_channels, integer=True)
        functional.check_positive("eps", eps)
        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; accepted: {sorted(ACTIVATIONS)}")
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        self.num_channels = num_channels
        self.nonlinearity = bool(nonlinearity)
        self.eps = float(eps)
        self.affine = bool(affine)
        self.activation = activation if self.nonlinearity else None
        self._channel_param_inits: dict[str, float] = {}
        if self.affine:
            self.register_channel_param("weight", 1.0, device=device, dtype=dtype)
            self.register_channel_param("bias", 0.0, device=device, dtype=dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.activation is not None and ACTIVATIONS[self.activation][1] is not None:
            self.register_channel_param(*ACTIVATIONS[self.activation][1], device=device, dtype=dtype)

    @classmethod
    def uses_batch_statistics_for(cls, nonlinearity: bool = True) -> bool:
        """Whether a layer of this class built with ``nonlinearity`` uses batch statistics."""
        return cls.batch_statistics

    @property
    def uses_batch_statistics(self) -> bool:
        """Whether this layer normalizes with batch statistics (and keeps moving averages)."""
        return type(self).uses_batch_statistics_for(self.nonlinearity)

    def register_channel_param(
        self, name: str, init: float, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Add a learnable per-channel vector ``name``, filled with ``init`` on reset."""
        self._channel_param_inits[name] = init
        value = torch.full((self.num_channels,), float(init), device=device, dtype=dtype)
        self.register_parameter(name, nn.Parameter(value))

    def reset_parameters(self) -> None:
        """Every per-channel parameter back to the paper's initial value (gamma 1, beta 0, v0 0, v1 1)."""
        with torch.no_grad():
            for name, init in self._channel_param_inits.items():
                getattr(self, name).fill_(init)

    def channel_param(self, name: str, dtype: torch.dtype) -> Tensor:
        """Per-channel parameter ``name`` shaped (1, C, 1, 1) in ``dtype``, to broadcast over NCHW."""
        return getattr(self, name).to(dtype).view(1, -1, 1, 1)

    @abc.abstractmethod
    def transform(self, x: Tensor) -> Tensor:
        """The expression in front of the per-channel affine, same shape as ``x`` (in its compute dtype)."""

    def activate(self, z: Tensor) -> Tensor:
        """The activation after the affine (identity without one)."""
        if self.activation is None:
            return z
        fn, param = ACTIVATIONS[self.activation]
        return fn(z, None if param is None else self.channel_param(param[0], z.dtype))

    def activation_module(self) -> nn.Module:
        """The activation after the affine as a standalone module (parameters copied)."""
        if self.activation is None:
            return nn.Identity()
        if self.activation == "relu":
            return nn.ReLU()
        if self.activation == "swish1":
            return nn.SiLU()
        return ChannelActivation(self.activation, getattr(self, ACTIVATIONS[self.activation][1][0]))

    def check_input(self, x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
        """``x`` after :func:`checked_input` (``ValueError`` naming the problem)."""
        return checked_input(x, type(self).__name__, self.num_channels, weight, bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_affine(x, self.weight, self.bias)

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        """The layer with ``gamma = weight``, ``beta = bias``: None, (C,) or per sample (N, C)."""
        x = self.check_input(x, weight, bias)
        z = formulas.apply_affine(self.transform(formulas.upcast(x)), weight, bias)
        return self.activate(z).to(x.dtype)

    def folded_affine(self) -> tuple[Tensor, Tensor] | None:
        """``(scale, shift)``, each (C,), such that in the current mode
        ``layer(x) == layer.activation_module()(x * scale + shift)``; None if the layer is
        not such an affine (it has per-sample statistics, or batch statistics in training)."""
        return None

    def _gamma_beta(self) -> tuple[Tensor, Tensor]:
        """``(gamma, beta)`` detached, ones/zeros without ``affine`` (on the device and in the dtype of the
        layer's first floating-point parameter or buffer: a BN without affine has only its moving averages)."""
        like = next((t for t in [*self.parameters(), *self.buffers()] if t.is_floating_point()), None)
        options = {"device": like.device, "dtype": like.dtype} if like is not None else {}
        gamma = self.weight.detach().clone() if self.weight is not None else torch.ones(self.num_channels, **options)
        beta = self.bias.detach().clone() if self.bias is not None else torch.zeros(self.num_channels, **options)
        return gamma, beta

    def extra_repr(self) -> str:
        affine = "" if self.affine else ", affine=False"
        act = f", activation={self.activation}" if self.activation else ""
        return f"{self.num_channels}, nonlinearity={self.nonlinearity}, eps={self.eps}{affine}{act}"


class GroupedNormAct2d(NormAct2d):
    """A layer with grouped statistics over ``groups`` groups of channels.

    ``groups=None`` (default) uses 32 groups lowered until they divide ``num_channels``;
    an explicit ``groups`` that does not divide ``num_channels`` raises ``ValueError``.
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        groups: int | None = None,
        affine: bool = True,
        activation: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation=activation, device=device, dtype=dtype
        )
        self.groups = stats.resolve_groups(num_channels, groups)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, groups={self.groups}"


class BatchStatsNormAct2d(NormAct2d):
    """A layer using batch statistics ``mu_{b,w,h}``/``s^2_{b,w,h}`` (the B series and BN).

    In training the statistics of the current batch are used (of all processes when
    ``sync=True`` under ``torch.distributed``) and moving averages are updated by
    :mod:`evonorm_core.running_stats` (``nn.BatchNorm2d``'s rule: ``momentum``, or a
    cumulative average with ``momentum=None``; variances stored unbiased). In eval the
    moving averages are used. Buffers exist only when the layer uses batch statistics
    (:attr:`uses_batch_statistics`); e.g. EvoNorm-B0 with ``nonlinearity=False`` is a plain affine.
    """

    batch_statistics = True
    track_mean = False

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        affine: bool = True,
        activation: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation=activation, device=device, dtype=dtype
        )
        self.momentum = running_stats.check_momentum(momentum)
        self.sync = bool(sync)
        self.process_group = process_group
        if self.uses_batch_statistics:
            factory = {"device": device, "dtype": dtype}
            if self.track_mean:
                self.register_buffer("running_mean", torch.zeros(num_channels, **factory))
            self.register_buffer("running_var", torch.ones(num_channels, **factory))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))

    def reset_running_stats(self) -> None:
        """Moving averages back to mean 0, variance 1, no batch counted."""
        if self.uses_batch_statistics:
            if self.track_mean:
                self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.reset_running_stats()

    def batch_moments(self, x: Tensor) -> tuple[Tensor | None, Tensor]:
        """Per-channel ``(mean, var)`` of shape (1, C, 1, 1): of the batch in training
        (updating the moving averages), the moving averages in eval; ``mean`` None unless tracked."""
        mean, var = functional.tracked_batch_moments(
            x, getattr(self, "running_mean", None), self.running_var, self.num_batches_tracked, self.training,
            self.momentum, self.sync, self.process_group,
        )
        return (None if mean is None else mean.view(1, -1, 1, 1)), var.view(1, -1, 1, 1)

    def extra_repr(self) -> str:
        sync = ", sync=True" if self.sync else ""
        return f"{super().extra_repr()}, momentum={self.momentum}{sync}"
