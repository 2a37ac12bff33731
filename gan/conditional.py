"""Class-conditional form of any registered normalization-activation layer.

BigGAN's conditional BatchNorm computes ``relu(bn(x) * (1 + W_g c) + W_b c)``: the fixed
per-channel ``gamma``/``beta`` of BN are replaced by per-sample vectors predicted from the
conditioning vector ``c`` (class embedding concatenated with the latent). The paper swaps
the whole BN-ReLU for another layer. :class:`ConditionalNormAct2d` does so by composition
around a layer of the suite, whose forward is ``activate(transform(x) * gamma + beta)``:
the layer's normalization (``transform``, including EvoNorm's ``v1``) and activation are
reused unchanged; only its ``gamma``/``beta`` become ``1 + W_g c`` and ``W_b c``.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from evonorm_core import norm_act_factory
from evonorm_core.layers import NormAct2d
from evonorm_core.layers.base import compute_dtype

LinearFactory = Callable[[int, int], nn.Module]


class ConditionalNormAct2d(nn.Module):
    """``activate(transform(x) * (1 + W_g c) + W_b c)`` around a :class:`NormAct2d` layer.

    Args:
        layer: the unconditional layer; its ``weight`` and ``bias`` (fixed ``gamma`` and
            ``beta``) are removed, everything else (``v0``/``v1``, running statistics) kept.
        cond_dim: size of the conditioning vector ``c``.
        make_linear: builds the bias-free projections ``W_g``, ``W_b`` as
            ``make_linear(cond_dim, num_channels)`` (spectrally normalized in BigGAN).
    """

    def __init__(self, layer: nn.Module, cond_dim: int, make_linear: LinearFactory) -> None:
        super().__init__()
        if not isinstance(layer, NormAct2d):
            raise TypeError(
                f"a conditional norm-act needs a layer built on evonorm_core's NormAct2d (its "
                f"transform/activate pieces), got {type(layer).__name__}"
            )
        layer.weight = None  # replaced by the class-conditional gain below
        layer.bias = None
        self.norm = layer
        self.gain = make_linear(cond_dim, layer.num_channels)
        self.bias = make_linear(cond_dim, layer.num_channels)

    @property
    def num_channels(self) -> int:
        return self.norm.num_channels

    def gamma_beta(self, cond: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample ``(1 + W_g c, W_b c)``, each shaped (N, C, 1, 1)."""
        shape = (cond.shape[0], -1, 1, 1)
        return 1 + self.gain(cond).view(shape), self.bias(cond).view(shape)

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        self.norm.check_input(x)
        if cond.dim() != 2 or cond.shape[0] != x.shape[0]:
            raise ValueError(f"cond must be (N, cond_dim) with N={x.shape[0]}, got shape {tuple(cond.shape)}")
        z = self.norm.transform(x.to(compute_dtype(x)))
        gamma, beta = self.gamma_beta(cond)
        return self.norm.activate(z * gamma.to(z.dtype) + beta.to(z.dtype)).to(x.dtype)


def conditional_norm_act_factory(
    spec: str | Callable[[int, bool], nn.Module], cond_dim: int, make_linear: LinearFactory, **options
) -> Callable[[int], ConditionalNormAct2d]:
    """``make(num_channels)`` building the conditional form of the layer ``spec``.

    ``spec`` is a registered name (``options`` are checked now) or a callable
    ``(num_channels, nonlinearity) -> NormAct2d``, as everywhere in the suite.
    """
    make_layer = norm_act_factory(spec, **options)

    def make(num_channels: int) -> ConditionalNormAct2d:
        return ConditionalNormAct2d(make_layer(num_channels, True), cond_dim, make_linear)

    return make
