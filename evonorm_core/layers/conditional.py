"""Class-conditional form of any normalization-activation layer of the suite.

BigGAN's conditional BatchNorm computes ``relu(bn(x) * (1 + W_g c) + W_b c)``: the fixed
per-channel ``gamma``/``beta`` of BN are replaced by per-sample vectors predicted from the
conditioning vector ``c`` (in BigGAN-deep the class embedding concatenated with the
latent). The paper swaps the whole BN-ReLU for another layer; :class:`ConditionalNormAct2d`
does so for any layer with a ``forward_affine(x, weight, bias)`` taking per-sample
``(N, C)`` weights, so the conditional layer runs through the layer's own (fused where the
layer is fused) forward:

.. math::
    y = \\mathrm{layer}(x;\\ \\gamma = 1 + W_g c,\\ \\beta = W_b c)
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..registry import NormActMaker, norm_act_factory

LinearMaker = Callable[[int, int], nn.Module]
"""``make_linear(in_features, out_features)``: a bias-free projection ``c -> W c``."""


def bias_free_linear(in_features: int, out_features: int) -> nn.Module:
    """The default projection: ``nn.Linear(in_features, out_features, bias=False)``."""
    return nn.Linear(in_features, out_features, bias=False)


@torch.fx.wrap
def checked_condition(cond: Tensor, x: Tensor, cond_dim: int) -> Tensor:
    """``cond`` itself, after checking that it is (N, cond_dim) for the input ``x``."""
    if not isinstance(cond, Tensor) or cond.dim() != 2 or cond.shape[0] != x.shape[0] or cond.shape[1] != cond_dim:
        got = tuple(cond.shape) if isinstance(cond, Tensor) else type(cond).__name__
        raise ValueError(f"cond must be (N, cond_dim) = ({x.shape[0]}, {cond_dim}) for input {tuple(x.shape)}, got {got}")
    return cond


class ConditionalNormAct2d(nn.Module):
    r"""``layer.forward_affine(x, 1 + W_g c, W_b c)``: a layer with class-conditional gamma/beta.

    .. math::
        y = \mathrm{layer}(x;\ \gamma = 1 + W_g c,\ \beta = W_b c)

    Args:
        layer: the layer, built with ``affine=False`` (its fixed ``gamma``/``beta`` are
            what the projections replace); everything else (``v0``/``v1``, moving
            averages, ``impl``) is its own.
        cond_dim: size of the conditioning vector ``c``.
        make_linear: builds the bias-free projections ``W_g`` (:attr:`gain`) and ``W_b``
            (:attr:`bias`) as ``make_linear(cond_dim, num_channels)``; default
            :func:`bias_free_linear` (BigGAN passes spectrally normalized ones).

    Shape: ``x`` (N, C, H, W), ``cond`` (N, cond_dim) -> (N, C, H, W).
    """

    def __init__(self, layer: nn.Module, cond_dim: int, make_linear: LinearMaker | None = None) -> None:
        super().__init__()
        if not callable(getattr(layer, "forward_affine", None)):
            raise TypeError(
                f"a conditional norm-act needs a layer with forward_affine(x, weight, bias) (evonorm_core's "
                f"NormAct2d and GraphLayer have it), got {type(layer).__name__}"
            )
        if getattr(layer, "weight", None) is not None or getattr(layer, "bias", None) is not None:
            raise ValueError(
                f"the layer of a conditional norm-act must be built with affine=False (its gamma/beta are "
                f"1 + W_g c and W_b c), got {type(layer).__name__} with its own weight/bias"
            )
        if isinstance(cond_dim, bool) or not isinstance(cond_dim, int) or cond_dim <= 0:
            raise ValueError(f"cond_dim must be a positive int, got {cond_dim!r}")
        make_linear = make_linear or bias_free_linear
        self.cond_dim = cond_dim
        self.norm = layer
        self.gain = make_linear(cond_dim, layer.num_channels)
        self.bias = make_linear(cond_dim, layer.num_channels)

    @property
    def num_channels(self) -> int:
        return self.norm.num_channels

    def gamma_beta(self, cond: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample ``(1 + W_g c, W_b c)``, each (N, C)."""
        return 1 + self.gain(cond), self.bias(cond)

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        gamma, beta = self.gamma_beta(checked_condition(cond, x, self.cond_dim))
        return self.norm.forward_affine(x, gamma, beta)

    def reset_parameters(self) -> None:
        for module in (self.norm, self.gain, self.bias):
            if callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()

    def extra_repr(self) -> str:
        return f"cond_dim={self.cond_dim}"


def conditional_norm_act_factory(
    spec: str | NormActMaker, cond_dim: int, make_linear: LinearMaker | None = None, **options
) -> Callable[[int], ConditionalNormAct2d]:
    """``make(num_channels)`` building the conditional form of the layer ``spec``.

    ``spec`` is a registered name (built with ``affine=False`` and ``options``, checked
    now) or a :data:`~evonorm_core.NormActMaker` whose layers come without affine (e.g.
    ``norm_act_factory(name, affine=False)``); the layer is built with ``nonlinearity=True``.
    """
    if isinstance(spec, str):
        options = {"affine": False, **options}
    make_layer = norm_act_factory(spec, **options)

    def make(num_channels: int) -> ConditionalNormAct2d:
        return ConditionalNormAct2d(make_layer(num_channels, True), cond_dim, make_linear)

    return make
