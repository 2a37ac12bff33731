"""What every normalization-activation layer in the suite shares.

A layer maps an NCHW tensor to one of the same shape and ends with the channel-wise
affine ``* gamma + beta`` (stored as ``weight`` and ``bias``, PyTorch's names). The
``nonlinearity`` flag follows the paper's Appendix A: with it off, an EvoNorm reduces to
the affine ``x * gamma + beta`` and a baseline to its normalization without activation.
Statistics are computed in float32 (float64 stays float64), so half-precision inputs,
e.g. under autocast, are normalized exactly and returned in their own dtype.
"""
from __future__ import annotations

import abc

import torch
from torch import Tensor, nn

from .. import statistics as stats


def check_positive(name: str, value: float, *, integer: bool = False) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``value`` is a positive (int) number."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ValueError(f"{name} must be a positive {'int' if integer else 'number'}, got {value!r}")


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype statistics are computed in: float64 stays, everything else is float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


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


class NormAct2d(nn.Module, abc.ABC):
    """Base class: ``activate(transform(x) * gamma + beta)``.

    Subclasses implement :meth:`transform`, the part of the paper's expression in front of
    the affine (for an EvoNorm, the whole searched expression; for a baseline, its
    normalization). Baselines pass an ``activation`` from :data:`ACTIVATIONS`, applied
    after the affine as in BN-ReLU. :meth:`forward` validates the input, computes in
    float32 (float64 stays float64) and casts back. ``gamma`` is :attr:`weight` (init 1),
    ``beta`` is :attr:`bias` (init 0); extra per-channel parameters (``v0`` init 0, ``v1``
    init 1) are made with :meth:`register_channel_param`.
    """

    def __init__(
        self, num_channels: int, nonlinearity: bool = True, eps: float = 1e-5, activation: str | None = None
    ) -> None:
        super().__init__()
        check_positive("num_channels", num_channels, integer=True)
        check_positive("eps", eps)
        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; accepted: {sorted(ACTIVATIONS)}")
        self.num_channels = num_channels
        self.nonlinearity = bool(nonlinearity)
        self.eps = float(eps)
        self.activation = activation if self.nonlinearity else None
        self._channel_param_inits: dict[str, float] = {}
        self.register_channel_param("weight", 1.0)
        self.register_channel_param("bias", 0.0)
        if self.activation is not None and ACTIVATIONS[self.activation][1] is not None:
            self.register_channel_param(*ACTIVATIONS[self.activation][1])

    def register_channel_param(self, name: str, init: float) -> None:
        """Add a learnable per-channel vector ``name``, filled with ``init`` on reset."""
        self._channel_param_inits[name] = init
        self.register_parameter(name, nn.Parameter(torch.full((self.num_channels,), float(init))))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for name, init in self._channel_param_inits.items():
                getattr(self, name).fill_(init)

    def channel_param(self, name: str, dtype: torch.dtype) -> Tensor:
        """Per-channel parameter ``name`` shaped (1, C, 1, 1) in ``dtype``, to broadcast over NCHW."""
        return getattr(self, name).to(dtype).view(1, -1, 1, 1)

    @abc.abstractmethod
    def transform(self, x: Tensor) -> Tensor:
        """The expression in front of the per-channel affine, same shape as ``x``."""

    def activate(self, z: Tensor) -> Tensor:
        if self.activation is None:
            return z
        fn, param = ACTIVATIONS[self.activation]
        return fn(z, None if param is None else self.channel_param(param[0], z.dtype))

    def check_input(self, x: Tensor) -> None:
        if x.dim() != 4:
            raise ValueError(f"{type(self).__name__} expects an NCHW tensor (4 dims), got shape {tuple(x.shape)}")
        if x.shape[1] != self.num_channels:
            raise ValueError(
                f"{type(self).__name__} was built for {self.num_channels} channels, "
                f"got input of shape {tuple(x.shape)} ({x.shape[1]} channels)"
            )

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        z = self.transform(x.to(compute_dtype(x)))
        z = z * self.channel_param("weight", z.dtype) + self.channel_param("bias", z.dtype)
        return self.activate(z).to(x.dtype)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return f"{self.num_channels}, nonlinearity={self.nonlinearity}, eps={self.eps}{act}"


class GroupedNormAct2d(NormAct2d):
    """A layer with grouped statistics over ``groups`` groups of channels.

    ``groups=None`` (default) uses 32 groups lowered until they divide ``num_channels``;
    an explicit ``groups`` that does not divide ``num_channels`` raises ``ValueError``.
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        eps: float = 1e-5,
        groups: int | None = None,
        activation: str | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps, activation)
        self.groups = stats.resolve_groups(num_channels, groups)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, groups={self.groups}"


class BatchStatsNormAct2d(NormAct2d):
    """A layer using batch statistics ``mu_{b,w,h}``/``s^2_{b,w,h}`` (the B series and BN).

    In training the statistics of the current batch are used (of all processes when
    ``sync=True`` under ``torch.distributed``) and moving averages are updated:
    ``running = (1 - momentum) * running + momentum * batch``, PyTorch's convention, the
    variance stored unbiased (times n / (n - 1)) as ``BatchNorm2d`` does. In eval the
    moving averages are used. Buffers are only created when the layer uses batch statistics
    (``uses_batch_stats``); e.g. EvoNorm-B0 with ``nonlinearity=False`` is a plain affine.
    """

    track_mean = False

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        activation: str | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps, activation)
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 < momentum <= 1:
            raise ValueError(f"momentum must be in (0, 1], got {momentum!r}")
        self.momentum = float(momentum)
        self.sync = bool(sync)
        self.process_group = process_group
        if self.uses_batch_stats:
            if self.track_mean:
                self.register_buffer("running_mean", torch.zeros(num_channels))
            self.register_buffer("running_var", torch.ones(num_channels))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    @property
    def uses_batch_stats(self) -> bool:
        return True

    def reset_running_stats(self) -> None:
        if self.uses_batch_stats:
            if self.track_mean:
                self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.reset_running_stats()

    def batch_moments(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per-channel ``(mean, var)`` of shape (1, C, 1, 1): of the batch in training, moving in eval."""
        if not self.training:
            mean = self.running_mean if self.track_mean else None
            var = self.running_var
        else:
            mean, var, count = stats.batch_moments(x, self.sync, self.process_group)
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                unbiased = var * (count / (count - 1)) if count > 1 else var
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), self.momentum)
                if self.track_mean:
                    self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
        shape = (1, -1, 1, 1)
        mean = None if mean is None else mean.to(x.dtype).view(shape)
        return mean, var.to(x.dtype).view(shape)

    def batch_std(self, x: Tensor) -> Tensor:
        """``sqrt(s^2_{b,w,h}(x) + eps)``, shape (1, C, 1, 1)."""
        return torch.sqrt(self.batch_moments(x)[1] + self.eps)

    def extra_repr(self) -> str:
        sync = ", sync=True" if self.sync else ""
        return f"{super().extra_repr()}, momentum={self.momentum}{sync}"
