"""BigGAN-deep (Brock et al., 2019) with a swappable generator normalization-activation.

Architecture facts follow the authors' BigGAN-PyTorch ``BigGANdeep.py``:

* G: ``z`` (dim_z) concatenated with a shared class embedding (shared_dim) is the
  conditioning vector of every block ("hierarchical latent" of BigGAN-deep); a linear
  layer maps it to a ``bottom_width`` x ``bottom_width`` map. Each resolution stage has
  ``depth`` (2) residual blocks with the 1x1 - 3x3 - 3x3 - 1x1 bottleneck (hidden width
  ``in / 4``); a stage's last block upsamples (nearest, x2) and its skip connection drops
  the extra channels instead of using a convolution. Self-attention after the stage at
  ``attention`` resolutions (64). Output: norm-act, 3x3 conv to RGB, tanh.
* D: mirror image with preactivation blocks (1x1 - 3x3 - 3x3 - 1x1, hidden ``out / 4``),
  average-pool downsampling in each stage's first block, a skip connection that grows
  channels by concatenating a learned 1x1 conv, global sum pooling and a class
  projection.
* Spectral norm in G and D, orthogonal init (:mod:`evonorm_suite.gan.layers`).

Every conditional BN-ReLU of G is the chosen ``norm_act`` in conditional form
(:class:`evonorm_core.ConditionalNormAct2d`: the layer's own forward with gamma = 1 + W_g c, beta = W_b c); the unconditional BN-ReLU before the output conv is the plain
layer. D has no normalization layers, as in BigGAN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from evonorm_core import conditional_norm_act_factory, norm_act_factory
from evonorm_suite.gan.layers import SelfAttention, sn_conv, sn_embedding, sn_linear, sn_linear_no_bias

# Per output resolution: channel multipliers (in, out) of each stage, as in BigGANdeep.py.
G_CHANNELS = {
    16: ([4, 4], [4, 4]),  # not in BigGANdeep.py: the 32 px layout with one stage fewer (the 8x8 digits)
    32: ([4, 4, 4], [4, 4, 4]),
    64: ([16, 16, 8, 4], [16, 8, 4, 2]),
    128: ([16, 16, 8, 4, 2], [16, 8, 4, 2, 1]),
}
D_CHANNELS = {
    16: ([4, 4], [4, 4]),
    32: ([4, 4, 4], [4, 4, 4]),
    64: ([1, 2, 4, 8], [2, 4, 8, 16]),
    128: ([1, 2, 4, 8, 16], [2, 4, 8, 16, 16]),
}
D_DOWNSAMPLE = {16: [True, False], 32: [True, True, False], 64: [True] * 4, 128: [True] * 5}
RESOLUTIONS = tuple(sorted(G_CHANNELS))


def check_resolution(resolution: int) -> None:
    if resolution not in G_CHANNELS:
        raise ValueError(f"unsupported resolution {resolution!r}; accepted: {list(RESOLUTIONS)}")


@dataclass(frozen=True)
class GeneratorSpec:
    """What a generator is built from; kept in checkpoints to rebuild it."""

    resolution: int = 128
    channels: int = 128  # BigGAN's G_ch
    num_classes: int = 1000
    dim_z: int = 128
    shared_dim: int = 128
    depth: int = 2
    bottom_width: int = 4
    attention: tuple[int, ...] = (64,)
    image_channels: int = 3  # 1 for greyscale data (the embedded digits)


class GBlock(nn.Module):
    """BigGAN-deep generator block: 1x1 - 3x3 - 3x3 - 1x1 with four conditional norm-acts."""

    def __init__(self, in_channels: int, out_channels: int, make_norm: Callable[[int], nn.Module], upsample: bool):
        super().__init__()
        if out_channels > in_channels:
            raise ValueError(f"a GBlock can only keep or drop channels, got {in_channels} -> {out_channels}")
        hidden = in_channels // 4
        self.out_channels = out_channels
        self.upsample = upsample
        self.norm1, self.conv1 = make_norm(in_channels), sn_conv(in_channels, hidden, 1)
        self.norm2, self.conv2 = make_norm(hidden), sn_conv(hidden, hidden, 3)
        self.norm3, self.conv3 = make_norm(hidden), sn_conv(hidden, hidden, 3)
        self.norm4, self.conv4 = make_norm(hidden), sn_conv(hidden, out_channels, 1)

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        h = self.norm2(self.conv1(self.norm1(x, cond)), cond)
        x = x[:, : self.out_channels]
        if self.upsample:
            h, x = F.interpolate(h, scale_factor=2), F.interpolate(x, scale_factor=2)
        h = self.conv3(self.norm3(self.conv2(h), cond))
        return self.conv4(self.norm4(h, cond)) + x


class Generator(nn.Module):
    """BigGAN-deep generator; ``forward(z, y)`` maps latents and class indices to images in [-1, 1].

    Args:
        spec: sizes (:class:`GeneratorSpec`).
        norm_act: the norm-act replacing BN-ReLU: a registered name (``bn_relu``,
            ``evonorm_b0``, ``evonorm_s0``, ``gn_relu``, ...) or a callable
            ``(num_channels, nonlinearity) -> NormAct2d``.
        norm_options: options of that layer (e.g. ``groups=16``, ``eps``, ``sync=True``).
    """

    def __init__(self, spec: GeneratorSpec, norm_act: str | Callable = "bn_relu", **norm_options) -> None:
        super().__init__()
        check_resolution(spec.resolution)
        self.spec = spec
        ch_in, ch_out = ([m * spec.channels for m in mults] for mults in G_CHANNELS[spec.resolution])
        cond_dim = spec.dim_z + spec.shared_dim
        make_norm = conditional_norm_act_factory(norm_act, cond_dim, sn_linear_no_bias, **norm_options)
        self.shared = nn.Embedding(spec.num_classes, spec.shared_dim)  # no spectral norm, as in BigGAN
        nn.init.orthogonal_(self.shared.weight)
        self.linear = sn_linear(cond_dim, ch_in[0] * spec.bottom_width**2)
        self.blocks = nn.ModuleList()
        resolution = spec.bottom_width
        for c_in, c_out in zip(ch_in, ch_out):
            for index in range(spec.depth):
                last = index == spec.depth - 1
                self.blocks.append(GBlock(c_in, c_out if last else c_in, make_norm, upsample=last))
            resolution *= 2
            if resolution in spec.attention:
                self.blocks.append(SelfAttention(c_out))
        self.output_norm = norm_act_factory(norm_act, **norm_options)(ch_out[-1], True)
        self.output_conv = sn_conv(ch_out[-1], spec.image_channels, 3)

    def condition(self, z: Tensor, y: Tensor) -> Tensor:
        """The conditioning vector ``[z, shared(y)]`` of every conditional norm-act."""
        return torch.cat([z, self.shared(y)], dim=1)

    def forward(self, z: Tensor, y: Tensor) -> Tensor:
        cond = self.condition(z, y)
        h = self.linear(cond).view(z.shape[0], -1, self.spec.bottom_width, self.spec.bottom_width)
        for block in self.blocks:
            h = block(h, cond) if isinstance(block, GBlock) else block(h)
        return torch.tanh(self.output_conv(self.output_norm(h)))


class DBlock(nn.Module):
    """BigGAN-deep discriminator block: preactivated 1x1 - 3x3 - 3x3 - 1x1, hidden ``out / 4``."""

    def __init__(self, in_channels: int, out_channels: int, downsample: bool) -> None:
        super().__init__()
        if out_channels < in_channels:
            raise ValueError(f"a DBlock can only keep or grow channels, got {in_channels} -> {out_channels}")
        hidden = out_channels // 4
        self.downsample = downsample
        self.conv1 = sn_conv(in_channels, hidden, 1)
        self.conv2 = sn_conv(hidden, hidden, 3)
        self.conv3 = sn_conv(hidden, hidden, 3)
        self.conv4 = sn_conv(hidden, out_channels, 1)
        self.conv_sc = sn_conv(in_channels, out_channels - in_channels, 1) if out_channels > in_channels else None

    def shortcut(self, x: Tensor) -> Tensor:
        if self.downsample:
            x = F.avg_pool2d(x, 2)
        return x if self.conv_sc is None else torch.cat([x, self.conv_sc(x)], dim=1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv1(F.relu(x))
        h = self.conv3(F.relu(self.conv2(F.relu(h))))
        h = F.relu(h)
        if self.downsample:
            h = F.avg_pool2d(h, 2)
        return self.conv4(h) + self.shortcut(x)


class Discriminator(nn.Module):
    """BigGAN-deep projection discriminator; ``forward(x, y)`` returns one logit per image."""

    def __init__(
        self,
        resolution: int = 128,
        channels: int = 128,
        num_classes: int = 1000,
        depth: int = 2,
        attention: tuple[int, ...] = (64,),
        image_channels: int = 3,
    ) -> None:
        super().__init__()
        check_resolution(resolution)
        ch_in, ch_out = ([m * channels for m in mults] for mults in D_CHANNELS[resolution])
        self.input_conv = sn_conv(image_channels, ch_in[0], 3)
        self.blocks = nn.ModuleList()
        for c_in, c_out, downsample in zip(ch_in, ch_out, D_DOWNSAMPLE[resolution]):
            for index in range(depth):
                self.blocks.append(DBlock(c_out if index else c_in, c_out, downsample and index == 0))
            resolution //= 2 if downsample else 1
            if resolution in attention:
                self.blocks.append(SelfAttention(c_out))
        self.linear = sn_linear(ch_out[-1], 1)
        self.embed = sn_embedding(num_classes, ch_out[-1])

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        h = self.input_conv(x)
        for block in self.blocks:
            h = block(h)
        h = torch.sum(F.relu(h), dim=(2, 3))
        return self.linear(h) + torch.sum(self.embed(y) * h, dim=1, keepdim=True)
