"""Building blocks shared by BigGAN-deep's generator and discriminator.

Every convolution, linear and embedding is initialised orthogonally (BigGAN's ``ortho``
init) and then spectrally normalized with one power iteration per forward
(``torch.nn.utils.parametrizations.spectral_norm``). BigGAN-deep's launch script uses
``SN_eps = 1e-6``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm

SN_EPS = 1e-6


def orthogonal_spectral(module: nn.Module, sn_eps: float = SN_EPS) -> nn.Module:
    """Orthogonally initialise ``module.weight``, then spectrally normalize it."""
    nn.init.orthogonal_(module.weight)
    return spectral_norm(module, eps=sn_eps)


def sn_conv(in_channels: int, out_channels: int, kernel_size: int = 3, bias: bool = True) -> nn.Module:
    """A "same"-padded convolution, orthogonal init, spectral norm."""
    conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=bias)
    return orthogonal_spectral(conv)


def sn_linear(in_features: int, out_features: int, bias: bool = True) -> nn.Module:
    return orthogonal_spectral(nn.Linear(in_features, out_features, bias=bias))


def sn_linear_no_bias(in_features: int, out_features: int) -> nn.Module:
    """The bias-free projection of a conditional norm-act (``W_g``, ``W_b``)."""
    return sn_linear(in_features, out_features, bias=False)


def sn_embedding(num_embeddings: int, dim: int) -> nn.Module:
    return orthogonal_spectral(nn.Embedding(num_embeddings, dim))


class SelfAttention(nn.Module):
    """SAGAN self-attention as used by BigGAN: ``x + gamma * o(attention)``, ``gamma`` init 0.

    Query (``theta``) and key (``phi``) have ``C/8`` channels, value (``g``) ``C/2``;
    keys and values are 2x2 max-pooled, which needs even height and width.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        if channels % 8:
            raise ValueError(f"self-attention needs channels divisible by 8, got {channels}")
        self.channels = channels
        self.theta = sn_conv(channels, channels // 8, 1, bias=False)
        self.phi = sn_conv(channels, channels // 8, 1, bias=False)
        self.g = sn_conv(channels, channels // 2, 1, bias=False)
        self.o = sn_conv(channels // 2, channels, 1, bias=False)
        self.gamma = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        query = self.theta(x).flatten(2)  # (N, C/8, HW)
        key = F.max_pool2d(self.phi(x), 2).flatten(2)  # (N, C/8, HW/4)
        value = F.max_pool2d(self.g(x), 2).flatten(2)  # (N, C/2, HW/4)
        attention = torch.softmax(query.transpose(1, 2) @ key, dim=-1)  # (N, HW, HW/4)
        out = (value @ attention.transpose(1, 2)).view(n, c // 2, h, w)
        return x + self.gamma * self.o(out)
