"""Datasets as in-memory tensors (digits proxy, CIFAR-10) and ImageNet folder loaders.

Nothing is ever downloaded. The embedded default is scikit-learn's ``load_digits()``
(1,797 real 8x8 handwritten digits, 10 classes) upsampled to a 3-channel image: a small
real task on which a broken layer stays near 10% and a working one learns. CIFAR-10 is
read from torchvision's folder layout, ImageNet from class-per-folder directories.
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset, Subset

Split = tuple[Tensor, Tensor, Tensor, Tensor]  # train_x, train_y, val_x, val_y

DIGITS_VAL_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_LAYOUT = "cifar-10-batches-py/{data_batch_1..data_batch_5, test_batch}"


def load_digits_proxy(image_size: int = 32) -> Split:
    """The embedded proxy task: sklearn digits, ``image_size`` square, 3 channels, normalized.

    A fixed seeded split (seed 0) puts 20% of the 1,797 images in validation; every call
    returns the same tensors. Images are bilinearly upsampled from 8x8, replicated to 3
    channels and standardized with the training split's mean and std.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8 (the digits are 8x8), got {image_size!r}")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)
    images = images.expand(-1, 3, -1, -1).contiguous()
    labels = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(DIGITS_SPLIT_SEED))
    num_val = int(round(len(labels) * DIGITS_VAL_FRACTION))
    val_idx, train_idx = order[:num_val], order[num_val:]
    mean, std = images[train_idx].mean(), images[train_idx].std()
    images = (images - mean) / std
    return images[train_idx], labels[train_idx], images[val_idx], labels[val_idx]


def cifar10_folder(data_dir: str | Path) -> Path:
    """The ``cifar-10-batches-py`` folder under (or at) ``data_dir``; a clear error if absent."""
    root = Path(data_dir).expanduser()
    for candidate in (root / "cifar-10-batches-py", root):
        if all((candidate / name).is_file() for name in _cifar_batch_names()):
            return candidate
    raise FileNotFoundError(
        f"CIFAR-10 not found at {str(root)!r}: expected torchvision's python layout "
        f"{str(root)}/{CIFAR10_LAYOUT} (the extracted cifar-10-python.tar.gz). "
        "Nothing is downloaded; fetch it yourself and pass its parent folder."
    )


def _cifar_batch_names() -> list[str]:
    return [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _read_cifar_batches(folder: Path, names: list[str]) -> tuple[Tensor, Tensor]:
    images, labels = [], []
    for name in names:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f, encoding="latin1")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch["labels"], dtype=np.int64))
    x = torch.from_numpy(np.concatenate(images)).float().div_(255.0)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (x - mean) / std, torch.from_numpy(np.concatenate(labels))


def load_cifar10(data_dir: str | Path) -> Split:
    """CIFAR-10 from torchvision's folder layout: 50,000 train and 10,000 test images, normalized."""
    folder = cifar10_folder(data_dir)
    train_x, train_y = _read_cifar_batches(folder, _cifar_batch_names()[:5])
    val_x, val_y = _read_cifar_batches(folder, ["test_batch"])
    return train_x, train_y, val_x, val_y


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
    """ImageNet from ``data_dir/train`` and ``data_dir/val`` class folders (``ImageFolder``).

    With ``holdout_fraction > 0`` the validation set is that seeded fraction of the
    *training* folder and training uses the rest: the paper's reranking protocol trains on
    90% of ImageNet-train and evaluates on the other 10% (``holdout_fraction=0.1``).
    """
    from torchvision.datasets import ImageFolder

    root = Path(data_dir).expanduser()
    needed = [root / "train"] + ([] if holdout_fraction > 0 else [root / "val"])
    missing = [str(p) for p in needed if not p.is_dir()]
    if missing:
        raise FileNotFoundError(
            f"ImageNet not found: missing {missing}; expected {root}/train/<class>/*.JPEG and "
            f"{root}/val/<class>/*.JPEG (val sorted into class folders), or --holdout-fraction to split train."
        )
    train = ImageFolder(root / "train", imagenet_transforms(resolution, True, randaugment))
    if holdout_fraction <= 0:
        return train, ImageFolder(root / "val", imagenet_transforms(resolution, False))
    if not holdout_fraction < 1:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}")
    held = ImageFolder(root / "train", imagenet_transforms(resolution, False))
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed)).tolist()
    num_val = int(len(order) * holdout_fraction)
    return Subset(train, order[num_val:]), Subset(held, order[:num_val])
