"""The EvoNorm layers of Liu et al., "Evolving Normalization-Activation Layers".

B series (paper Table 2; use batch statistics, moving averages at inference) and S series
(Table 3; per-sample only). Each replaces a BN-ReLU. With ``nonlinearity=False`` each is
the channel-wise affine ``x * gamma + beta`` (Appendix A), used where the replaced
BatchNorm had no activation after it.

``impl="fused"`` (default) runs the fused kernels of :mod:`evonorm_core.ops`: a
hand-derived backward that keeps only the input and small statistics.
``impl="reference"`` runs the formula as composed PyTorch ops (:meth:`transform`); it is
twice differentiable, and is what B-series layers with ``sync=True`` use when more than
one process takes part.
"""
from __future__ import annotations

import abc

import torch
import torch.distributed as dist
from torch import Tensor

from .. import ops
from .. import statistics as stats
from .base import BatchStatsNormAct2d, GroupedNormAct2d

IMPLS = ("fused", "reference")


def check_impl(impl: str) -> str:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {list(IMPLS)}, got {impl!r}")
    return impl


class _EvoNormB(BatchStatsNormAct2d):
    """``x / max(sqrt(s^2_{b,w,h}(x) + eps), instance_term(x)) * gamma + beta``."""

    variant = ""  # the fused kernel's name for the instance term, see ops.B_VARIANTS

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        impl: str = "fused",
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps, momentum, sync, process_group)
        self.impl = check_impl(impl)

    def syncs_across_processes(self) -> bool:
        return (
            self.sync and dist.is_available() and dist.is_initialized() and dist.get_world_size(self.process_group) > 1
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.impl == "reference" or (self.training and self.syncs_across_processes()):
            return super().forward(x)
        self.check_input(x)
        if not self.nonlinearity:
            return ops.affine(x, self.weight, self.bias)
        return ops.evonorm_b(
            x,
            self.weight,
            self.bias,
            getattr(self, "v1", None),
            self.variant,
            self.eps,
            self.running_var,
            self.training,
            self.momentum,
            self.num_batches_tracked,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}"

    @property
    def uses_batch_stats(self) -> bool:
        return self.nonlinearity

    @abc.abstractmethod
    def instance_term(self, x: Tensor) -> Tensor:
        """The variant's second operand of the ``max`` in the denominator (composed ops)."""

    def instance_rms(self, x: Tensor) -> Tensor:
        return torch.sqrt(stats.instance_mean_square(x) + self.eps)

    def transform(self, x: Tensor) -> Tensor:
        if not self.nonlinearity:
            return x
        return x / torch.maximum(self.batch_std(x), self.instance_term(x))


class EvoNormB0(_EvoNormB):
    r"""EvoNorm-B0 (paper Table 2, Fig. 9):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; v_1 x + \sqrt{s^2_{w,h}(x) + \epsilon})} \gamma + \beta

    ``s^2_{b,w,h}`` is the per-channel batch variance (moving average in eval),
    ``s^2_{w,h}`` the per-sample, per-channel instance variance, ``v_1`` a learnable
    per-channel vector initialised to 1. Scale invariant in training: ``f(a x) = f(x)``
    for ``a > 0``. With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    variant = "b0"

    def __init__(self, num_channels: int, nonlinearity: bool = True, **options) -> None:
        super().__init__(num_channels, nonlinearity, **options)
        if self.nonlinearity:
            self.register_channel_param("v1", 1.0)

    def instance_term(self, x: Tensor) -> Tensor:
        return self.channel_param("v1", x.dtype) * x + torch.sqrt(stats.instance_var(x) + self.eps)


class EvoNormB1(_EvoNormB):
    r"""EvoNorm-B1 (paper Table 2):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; (x + 1) \sqrt{\mu_{w,h}(x^2) + \epsilon})} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    variant = "b1"

    def instance_term(self, x: Tensor) -> Tensor:
        return (x + 1) * self.instance_rms(x)


class EvoNormB2(_EvoNormB):
    r"""EvoNorm-B2 (paper Table 2):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; \sqrt{\mu_{w,h}(x^2) + \epsilon} - x)} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    variant = "b2"

    def instance_term(self, x: Tensor) -> Tensor:
        return self.instance_rms(x) - x


class _EvoNormS(GroupedNormAct2d):
    """``x * sigmoid(gate * x) / group_denominator(x) * gamma + beta``, grouped over ``groups``."""

    centered = True  # group variance (S0, S1) rather than group mean square (S2)

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        eps: float = 1e-5,
        groups: int | None = None,
        impl: str = "fused",
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps, groups)
        self.impl = check_impl(impl)

    def forward(self, x: Tensor) -> Tensor:
        if self.impl == "reference":
            return super().forward(x)
        self.check_input(x)
        if not self.nonlinearity:
            return ops.affine(x, self.weight, self.bias)
        v1 = getattr(self, "v1", None)
        return ops.evonorm_s(x, self.weight, self.bias, v1, self.groups, self.eps, self.centered)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}"

    def gate(self, x: Tensor) -> Tensor:
        return x

    def denominator(self, x: Tensor) -> Tensor:
        return torch.sqrt(stats.group_var(x, self.groups) + self.eps)

    def transform(self, x: Tensor) -> Tensor:
        if not self.nonlinearity:
            return x
        return x * torch.sigmoid(self.gate(x)) / self.denominator(x)


class EvoNormS0(_EvoNormS):
    r"""EvoNorm-S0 (paper Table 3, Fig. 1):

    .. math::
        \frac{x \, \sigma(v_1 x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}} \gamma + \beta

    ``s^2_{w,h,c/g}`` is the variance over each sample's group of ``C / groups`` channels
    (32 groups by default), ``v_1`` a learnable per-channel vector initialised to 1. For
    large ``|x|`` it tends to ``x / group_std`` (``v_1 > 0``) or to 0 (``v_1 < 0``).
    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    def __init__(self, num_channels: int, nonlinearity: bool = True, **options) -> None:
        super().__init__(num_channels, nonlinearity, **options)
        if self.nonlinearity:
            self.register_channel_param("v1", 1.0)

    def gate(self, x: Tensor) -> Tensor:
        return self.channel_param("v1", x.dtype) * x


class EvoNormS1(_EvoNormS):
    r"""EvoNorm-S1 (paper Table 3):

    .. math::
        \frac{x \, \sigma(x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """


class EvoNormS2(_EvoNormS):
    r"""EvoNorm-S2 (paper Table 3):

    .. math::
        \frac{x \, \sigma(x)}{\sqrt{\mu_{w,h,c/g}(x^2) + \epsilon}} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    centered = False

    def denominator(self, x: Tensor) -> Tensor:
        return torch.sqrt(stats.group_mean_square(x, self.groups) + self.eps)
