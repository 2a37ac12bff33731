"""The paper's classifiers by name, each with a pluggable normalization-activation layer.

    >>> model = build_model("resnet50", "evonorm_b0")
    >>> model = build_model("mobilenetv2", "evonorm_s0", width_multiplier=1.1)

``norm_act`` is a registered layer name (see :func:`evonorm_core.list_norm_acts`) or a
callable ``(num_channels, nonlinearity) -> nn.Module``, e.g. one that builds a searched
layer from a genome.
"""
from __future__ import annotations

from typing import Callable, Union

from torch import nn

from ..registry import norm_act_factory
from .mbconv import MNASNET_B1, MOBILENET_V2, MBConvNet, efficientnet_config
from .resnet import STAGE_DEPTHS, PreActResNet

NormActSpec = Union[str, Callable[[int, bool], nn.Module]]

# name -> input resolution the paper trains it at (section 5.1)
MODEL_RESOLUTIONS = {
    "resnet50": 224,
    "resnet101": 224,
    "mobilenetv2": 224,
    "mnasnet_b1": 224,
    "efficientnet_b0": 224,
    "efficientnet_b5": 456,
}
MODEL_NAMES = tuple(MODEL_RESOLUTIONS)


def build_model(
    name: str,
    norm_act: NormActSpec = "bn_relu",
    num_classes: int = 1000,
    width_multiplier: float = 1.0,
    unstrided_downsamples: int = 0,
    depth_multiplier: float = 1.0,
    **norm_act_options,
) -> nn.Module:
    """Build classifier ``name`` (one of :data:`MODEL_NAMES`) with ``norm_act`` layers.

    ``width_multiplier`` scales channels on top of the model's own scaling (MobileNetV2's
    0.9x/1.0x/1.1x of Fig. 11, the anchors' 0.25x/0.5x); ``unstrided_downsamples`` runs the
    first downsamplings at stride 1 (2 for the CIFAR anchors); ``depth_multiplier`` scales
    every stage's block count, rounded up (EfficientNet's compound depth comes on top; the
    layer search's CPU preset uses one block per stage); ``norm_act_options`` go to
    the layer (``groups``, ``eps``, ``momentum``, ``sync`` ...).
    """
    key = name.lower().replace("-", "_")
    if key not in MODEL_RESOLUTIONS:
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(MODEL_NAMES)}")
    for name_, value in (("width_multiplier", width_multiplier), ("depth_multiplier", depth_multiplier)):
        if not value > 0:
            raise ValueError(f"{name_} must be positive, got {value!r}")
    make = norm_act_factory(norm_act, **norm_act_options)
    common = dict(num_classes=num_classes, unstrided_downsamples=unstrided_downsamples)
    if key.startswith("resnet"):
        depths = STAGE_DEPTHS[int(key[6:])]
        return PreActResNet(depths, make, width_multiplier=width_multiplier, depth_multiplier=depth_multiplier, **common)
    if key in ("mobilenetv2", "mnasnet_b1"):
        config = MOBILENET_V2 if key == "mobilenetv2" else MNASNET_B1
        return MBConvNet(config, make, width_multiplier=width_multiplier, depth_multiplier=depth_multiplier, **common)
    config, width, depth, _ = efficientnet_config(key.split("_")[1])
    return MBConvNet(
        config, make, width_multiplier=width * width_multiplier, depth_multiplier=depth * depth_multiplier, **common
    )
