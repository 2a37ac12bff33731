"""Negative controls: norm-act layers that do not normalize their input.

A miniature that cannot set these apart from BN-ReLU (GN-ReLU for the batch-independent
layers) cannot resolve the paper's claims about normalization layers. All end, as every
layer of the suite, with the per-channel affine ``* gamma + beta``; nothing depends on the
rest of the batch and nothing is kept for eval. They take ``eps`` like every other layer, so
that a launcher can pass the same options to any layer.

* :class:`AffineReLU2d` (``no_norm_relu``): BN-ReLU with the normalization removed.
* :class:`TanhMaxTanh2d` (``random_rej``): the paper's "Random + rej" row of Table 2, a
  random sample of the search space that passed the rejection rules.
* :class:`RandomSample2d` (``random_sample``): the paper's "Random" row of Table 2, a random
  sample of the search space without rejection, which does not train on any model (1e-3).
"""
from __future__ import annotations

import abc

import torch
from torch import Tensor

from .. import statistics as stats
from .base import NormAct2d


class AffineReLU2d(NormAct2d):
    r"""The no-normalization control of Tables 2 and 3: the per-channel affine, then ReLU.

    .. math::
        \max(x \gamma + \beta, 0)

    BN-ReLU without its normalization: the same parameters (``gamma`` init 1, ``beta`` init 0)
    and the same order (affine, then ReLU), so the only difference from BN-ReLU is the
    normalization. At its initial values it is a bare ReLU. With ``nonlinearity=False``:
    ``x * gamma + beta``.
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation="relu", device=device, dtype=dtype
        )

    def transform(self, x: Tensor) -> Tensor:
        return x

    def folded_affine(self) -> tuple[Tensor, Tensor]:
        return self._gamma_beta()


class SearchSpaceSample2d(NormAct2d):
    """A sample of the search space, as Table 2 lists them: ``expression(x) * gamma + beta``.

    Subclasses define :meth:`expression`. As a searched layer it ends with the affine every
    searched layer ends with, and with ``nonlinearity=False`` it is that affine,
    ``x * gamma + beta`` (Appendix A's rule for the EvoNorms).
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_channels, nonlinearity, eps=eps, affine=affine, device=device, dtype=dtype)

    @abc.abstractmethod
    def expression(self, x: Tensor) -> Tensor:
        """The sampled expression, before the affine."""

    def transform(self, x: Tensor) -> Tensor:
        return self.expression(x) if self.nonlinearity else x

    def folded_affine(self) -> tuple[Tensor, Tensor] | None:
        return None if self.nonlinearity else self._gamma_beta()


class TanhMaxTanh2d(SearchSpaceSample2d):
    r"""The "Random + rej" layer of Table 2 (a random sample that passed the rejection rules):

    .. math::
        \tanh(\max(x, \tanh(x))) \gamma + \beta

    It has no normalization: the paper reports 70.2 / 71.6% on ResNet-50 / ResNet-101 and a
    layer that does not train (1e-3) on the four mobile models.
    """

    def expression(self, x: Tensor) -> Tensor:
        return torch.tanh(torch.maximum(x, torch.tanh(x)))


class RandomSample2d(SearchSpaceSample2d):
    r"""The "Random" layer of Table 2, a random sample of the search space (no rejection rules):

    .. math::
        \mathrm{sign}(z) \sqrt{z} \gamma + \beta, \quad z = \sqrt{s^2_{w,h}(\sigma(x)) + \epsilon}

    ``sqrt`` is the search space's signed square root, ``sign(z) sqrt(|z|)``, and ``z`` the
    instance std of ``sigmoid(x)`` (with the ``epsilon`` every std of the search space has). The
    output is constant over each sample's channel plane: everything the layer passes on about
    a plane is how much its sigmoid varies. The paper reports near-zero accuracy (1e-3) on all
    six models.
    """

    def expression(self, x: Tensor) -> Tensor:
        z = torch.sqrt(stats.instance_var(torch.sigmoid(x)) + self.eps)
        return torch.sqrt(z).expand_as(x)  # z > 0, so sign(z) = 1
