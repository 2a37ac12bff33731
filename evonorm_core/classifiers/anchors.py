"""The three anchor architectures of the layer search's proxy task (paper section 4.2).

ResNet50-CIFAR (pre-activation ResNet-50, 0.25x channels), MobileNetV2-CIFAR (0.5x) and
EfficientNet-CIFAR (EfficientNet-B0, 0.5x): the ImageNet models of
:mod:`evonorm_core.classifiers.models`, built by the same code with only the channel multiplier
changed and "the first two convolutions with spatial reduction ... modified to use stride
one". Depth and everything else are unchanged.

    >>> model = build_anchor("resnet50_cifar", "evonorm_s0")
    >>> model(torch.randn(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""
from __future__ import annotations

from torch import nn

from .models import NormActSpec, build_model

# anchor name -> (ImageNet model, channel multiplier)
ANCHORS = {
    "resnet50_cifar": ("resnet50", 0.25),
    "mobilenetv2_cifar": ("mobilenetv2", 0.5),
    "efficientnet_cifar": ("efficientnet_b0", 0.5),
}
ANCHOR_NAMES = tuple(ANCHORS)
CIFAR_UNSTRIDED_DOWNSAMPLES = 2


def build_anchor(name: str, norm_act: NormActSpec, num_classes: int = 10, depth_multiplier: float = 1.0) -> nn.Module:
    """Build anchor ``name`` (one of :data:`ANCHOR_NAMES`) with ``norm_act`` layers.

    ``depth_multiplier`` 1.0 is the paper's anchor; smaller values keep fewer blocks per
    stage (rounded up, so 0.01 keeps one), for proxy runs that must fit a CPU.

    ``norm_act`` is a registered layer name or a callable ``(num_channels, nonlinearity)
    -> nn.Module``; every BN-ReLU/BN-Swish slot gets ``(C, True)``, every BN without an
    activation ``(C, False)``.
    """
    key = name.lower().replace("-", "_")
    if key not in ANCHORS:
        raise ValueError(f"unknown anchor {name!r}; accepted: {', '.join(ANCHOR_NAMES)}")
    model, width = ANCHORS[key]
    return build_model(
        model, norm_act, num_classes=num_classes, width_multiplier=width,
        unstrided_downsamples=CIFAR_UNSTRIDED_DOWNSAMPLES, depth_multiplier=depth_multiplier,
    )
