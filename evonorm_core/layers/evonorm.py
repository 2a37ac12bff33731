"""The EvoNorm layers of Liu et al., "Evolving Normalization-Activation Layers".

B series (paper Table 2; use batch statistics, moving averages at inference) and S series
(Table 3; per-sample only). Each replaces a BN-ReLU. With ``nonlinearity=False`` each is
the channel-wise affine ``x * gamma + beta`` (Appendix A), used where the replaced
BatchNorm had no activation after it.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import statistics as stats
from .base import BatchStatsNormAct2d, GroupedNormAct2d


class _EvoNormB(BatchStatsNormAct2d):
    """``x / max(sqrt(s^2_{b,w,h}(x) + eps), instance_term(x)) * gamma + beta``."""

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        sync: bool = False,
        process_group: object | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps, momentum, sync, process_group)

    @property
    def uses_batch_stats(self) -> bool:
        return self.nonlinearity

    def instance_term(self, x: Tensor) -> Tensor:
        raise NotImplementedError

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

    def instance_term(self, x: Tensor) -> Tensor:
        return (x + 1) * self.instance_rms(x)


class EvoNormB2(_EvoNormB):
    r"""EvoNorm-B2 (paper Table 2):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; \sqrt{\mu_{w,h}(x^2) + \epsilon} - x)} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    def instance_term(self, x: Tensor) -> Tensor:
        return self.instance_rms(x) - x


class _EvoNormS(GroupedNormAct2d):
    """``x * sigmoid(gate * x) / group_denominator(x) * gamma + beta``, grouped over ``groups``."""

    def __init__(self, num_channels: int, nonlinearity: bool = True, eps: float = 1e-5, groups: int | None = None):
        super().__init__(num_channels, nonlinearity, eps, groups)

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

    def denominator(self, x: Tensor) -> Tensor:
        return torch.sqrt(stats.group_mean_square(x, self.groups) + self.eps)
