"""How the paper trains its CIFAR anchors on the proxy task (section 4.2, Appendix C), defined once.

"SGD with learning rate 0.1, Nesterov momentum 0.9 and weight decay 1e-4" (on convolution and
linear weights only, :func:`~evonorm_core.classifiers.optimizer.build_optimizer`) at 128 images
per batch, on 24x24 random crops of the 32x32 training images, validated on the whole images.
The layer search's proxy takes these as its defaults, and the classification launcher trains
an anchor with them; neither restates a value.
"""
from __future__ import annotations

from dataclasses import dataclass

from .optimizer import OptimizerSettings


@dataclass(frozen=True)
class ProxyTraining:
    """The proxy task's images, batch and optimizer."""

    image_size: int = 32
    crop_size: int = 24
    batch_size: int = 128
    optimizer: OptimizerSettings = OptimizerSettings("sgd", lr=0.1, weight_decay=1e-4)


PROXY_TRAINING = ProxyTraining()
