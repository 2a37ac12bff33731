"""Building blocks shared by the classifier families: convolutions, initialization, stride plans."""
from __future__ import annotations

import math

from torch import nn


def conv(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """A bias-free convolution with 'same' padding for odd kernels."""
    return nn.Conv2d(in_channels, out_channels, kernel_size, stride, kernel_size // 2, groups=groups, bias=False)


class StridePlan:
    """Hands out strides in network order, running the first ``unstrided`` downsamplings at stride 1.

    The paper's CIFAR anchors (section 4.2) modify "the first two convolutions with spatial
    reduction ... to use stride one"; ``StridePlan(2)`` does exactly that while the model
    code stays the ImageNet code. A model asks :meth:`next` once per convolution that can
    reduce resolution, in forward order.
    """

    def __init__(self, unstrided: int = 0) -> None:
        if isinstance(unstrided, bool) or not isinstance(unstrided, int) or unstrided < 0:
            raise ValueError(f"unstrided_downsamples must be a non-negative int, got {unstrided!r}")
        self.remaining = unstrided

    def next(self, stride: int) -> int:
        """``stride``, or 1 while downsamplings are still to be skipped."""
        if stride > 1 and self.remaining > 0:
            self.remaining -= 1
            return 1
        return stride


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a scaled channel count to a multiple of ``divisor``, never below 90% of it.

    The rounding of MobileNetV2, MnasNet and EfficientNet (``round_filters``).
    """
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_fan_out(conv: nn.Conv2d) -> int:
    """Outputs one input channel feeds: ``kh * kw * out_channels / groups``.

    ``nn.init.kaiming_normal_(mode="fan_out")`` counts all output channels even for a
    grouped convolution, so a depthwise conv would start ``C`` times too small in variance
    and, without a normalizing layer after it, the signal would vanish within a few blocks
    (as TF's ``variance_scaling`` on a depthwise kernel, timm's ``_init_weight_goog``).
    """
    kh, kw = conv.kernel_size
    return kh * kw * conv.out_channels // conv.groups


def init_weights(model: nn.Module) -> None:
    """He-normal (fan-out, per group) convolutions, small-normal classifier, zero biases.

    Norm-act layers keep the initialization they define themselves.
    """
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.normal_(module.weight, std=math.sqrt(2.0 / conv_fan_out(module)))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.01)
            nn.init.zeros_(module.bias)
