"""ImageNet for the paper's classifiers: its normalization and the training/evaluation transforms.

Loading is :func:`evonorm_core.experiment.data.imagenet`'s (nothing is ever downloaded); here
the images get the classification recipes' augmentation. The in-memory proxy datasets (digits,
MNIST, CIFAR-10) live with the classifiers in :mod:`evonorm_core.classifiers.data`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from torch.utils.data import Dataset
from torchvision import transforms as T

from evonorm_core.experiment import data

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def imagenet_transforms(resolution: int, train: bool, randaugment: bool = False) -> Callable:
    """Inception-style crop and flip (+ RandAugment) for training; resize/0.875 + center crop for eval."""
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
