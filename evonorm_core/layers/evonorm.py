"""The EvoNorm layers of Liu et al., "Evolving Normalization-Activation Layers".

B series (paper Table 2; use batch statistics, moving averages at inference) and S series
(Table 3; per-sample only). Each replaces a BN-ReLU. With ``nonlinearity=False`` each is
the channel-wise affine ``x * gamma + beta`` (Appendix A), used where the replaced
BatchNorm had no activation after it.

The layers hold state and call :mod:`evonorm_core.functional`: ``impl="fused"`` (default)
runs the fused operators (a hand-derived backward that keeps only the input and small
statistics), ``impl="reference"`` the formula as composed PyTorch ops (twice
differentiable). Both take ``gamma``/``beta`` per channel or per sample
(:meth:`~.base.NormAct2d.forward_affine`).
"""
from __future__ import annotations

import abc

import torch
from torch import Tensor

from .. import formulas, functional
from .base import BatchStatsNormAct2d, GroupedNormAct2d


class _EvoNorm(abc.ABC):
    """What every EvoNorm shares on top of its base class: ``impl``, ``v1`` where the formula
    has one, and dispatch to :meth:`_call` (the functional form) or, with ``nonlinearity=False``,
    the plain affine."""

    has_v1 = False

    def _init_evonorm(self, impl: str, device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        self.impl = functional.check_impl("impl", impl)
        if self.nonlinearity and self.has_v1:
            self.register_channel_param("v1", 1.0, device=device, dtype=dtype)

    @abc.abstractmethod
    def _call(self, x: Tensor, weight: Tensor | None, bias: Tensor | None, impl: str) -> Tensor:
        """The series' functional form (:mod:`evonorm_core.functional`) on ``x`` with this layer's state."""

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        # the input checked here; the public functional forms' checks of the layer's own state are left out, it
        # was checked when the layer was built (an eval-mode B0 call at 1x8x2x2 took 16.3-16.7 us with them and
        # 13.3-15.4 without: docs/results/kernel_probes/layer_host_cost)
        x = self.check_input(x, weight, bias)
        if not self.nonlinearity:
            return functional._affine(x, weight, bias, self.impl, type(self).__name__)
        return self._call(x, weight, bias, self.impl)

    def _v1(self) -> Tensor | None:
        # by has_v1 rather than a getattr with a default: on a layer without v1 (S1, S2, B1, B2) that costs
        # nn.Module.__getattr__'s raise and the catch, about 1.4 us a call
        return self.v1 if self.has_v1 else None

    def transform(self, x: Tensor) -> Tensor:
        if not self.nonlinearity:
            return x
        return self._call(formulas.upcast(x), None, None, "reference")

    def folded_affine(self) -> tuple[Tensor, Tensor] | None:
        return None if self.nonlinearity else self._gamma_beta()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}"


class _EvoNormB(_EvoNorm, BatchStatsNormAct2d):
    """``x / max(sqrt(s^2_{b,w,h}(x) + eps), u(x)) * gamma + beta``, ``u`` the variant's instance term."""

    variant = ""  # functional.evonorm_b's name of the instance term, see functional.B_VARIANTS

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        impl: str = "fused",
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, momentum=momentum, sync=sync, process_group=process_group,
            affine=affine, device=device, dtype=dtype,
        )
        self._init_evonorm(impl, device, dtype)

    @classmethod
    def uses_batch_statistics_for(cls, nonlinearity: bool = True) -> bool:
        return bool(nonlinearity)  # without it, the affine x * gamma + beta

    def _call(self, x: Tensor, weight: Tensor | None, bias: Tensor | None, impl: str) -> Tensor:
        return functional._evonorm_b(
            x, weight, bias, self._v1(), self.running_var, self.num_batches_tracked, self.variant,
            self.training, self.momentum, self.eps, self.sync, self.process_group, impl, type(self).__name__,
        )


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
    has_v1 = True


class EvoNormB1(_EvoNormB):
    r"""EvoNorm-B1 (paper Table 2):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; (x + 1) \sqrt{\mu_{w,h}(x^2) + \epsilon})} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    variant = "b1"


class EvoNormB2(_EvoNormB):
    r"""EvoNorm-B2 (paper Table 2):

    .. math::
        \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\; \sqrt{\mu_{w,h}(x^2) + \epsilon} - x)} \gamma + \beta

    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    variant = "b2"


class _EvoNormS(_EvoNorm, GroupedNormAct2d):
    """``x * sigmoid(gate * x) / group_denominator(x) * gamma + beta``, grouped over ``groups``."""

    centered = True  # group variance (S0, S1) rather than group mean square (S2)

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        groups: int | None = None,
        impl: str = "fused",
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps=eps, groups=groups, affine=affine, device=device, dtype=dtype)
        self._init_evonorm(impl, device, dtype)

    def _call(self, x: Tensor, weight: Tensor | None, bias: Tensor | None, impl: str) -> Tensor:
        return functional._evonorm_s(
            x, weight, bias, self._v1(), self.groups, self.eps, self.centered, impl, type(self).__name__
        )


class EvoNormS0(_EvoNormS):
    r"""EvoNorm-S0 (paper Table 3, Fig. 1):

    .. math::
        \frac{x \, \sigma(v_1 x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}} \gamma + \beta

    ``s^2_{w,h,c/g}`` is the variance over each sample's group of ``C / groups`` channels
    (32 groups by default), ``v_1`` a learnable per-channel vector initialised to 1. For
    large ``|x|`` it tends to ``x / group_std`` (``v_1 > 0``) or to 0 (``v_1 < 0``).
    With ``nonlinearity=False``: ``x * gamma + beta``.
    """

    has_v1 = True


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
