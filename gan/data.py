"""Image datasets for GAN training: (image in [-1, 1] of shape (3, R, R), class index).

* ``digits`` (the built-in default): scikit-learn's ``load_digits`` (real 8x8 handwritten
  digits, 10 classes, shipped on disk), the 1,438 images of the fixed training split,
  upsampled bilinearly to R x R, greyscale (1 channel).
* ``cifar10``: torchvision's CIFAR-10 folder layout (``cifar-10-batches-py``) under ``root``.
* ``imagenet``: an ImageFolder tree (``root/<wnid>/*.JPEG``), shorter side resized to R
  and center-cropped, as BigGAN's preprocessing.
* ``array``: a prepared file, ``.npz`` or ``.hdf5``/``.h5`` with ``imgs`` (N, 3, R, R)
  uint8 and ``labels`` (N,) (the layout of BigGAN-PyTorch's ``make_hdf5.py``).

Nothing is downloaded: a missing path raises ``FileNotFoundError`` naming it.
"""
from __future__ import annotations

import os
import zipfile

import h5py
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, TensorDataset

from evonorm_core.experiment.data import digits

DATASETS = ("digits", "cifar10", "imagenet", "array")


def to_unit_range(images_uint8: Tensor) -> Tensor:
    """uint8 [0, 255] -> float [-1, 1]."""
    return images_uint8.float() / 127.5 - 1


def to_uint8(images: Tensor) -> Tensor:
    """float [-1, 1] -> uint8 [0, 255] (what Inception-based metrics take)."""
    return ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def digits_dataset(resolution: int = 32, split: str = "train") -> TensorDataset:
    """scikit-learn's 8x8 digits upsampled to ``resolution``, greyscale (1 channel), in [-1, 1].

    ``split``: the ``train`` images (the GAN's training set and the FID reference) or the
    held-out ``val`` images (the FID floor: real digits the generator never saw), the fixed
    split of :func:`evonorm_core.experiment.data.digits`.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    data = digits(resolution, channels=1)
    images, labels = (data.train_images, data.train_labels) if split == "train" else (data.val_images, data.val_labels)
    return TensorDataset(images * 2 - 1, labels)


class ArrayImageDataset(Dataset):
    """Images and labels from a prepared ``.npz`` or ``.hdf5``/``.h5`` file (keys ``imgs``, ``labels``).

    ``.npz`` is loaded into memory (small sets); ``.hdf5`` is read image by image through
    a handle each process opens on first use, so ImageNet 128 (~63 GB) is never copied.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._images = None  # the hdf5 handle's dataset, opened lazily in each worker
        if not path.endswith((".npz", ".hdf5", ".h5")):
            raise ValueError(f"array dataset {path!r} must end with .npz, .hdf5 or .h5")
        try:
            if path.endswith(".npz"):
                arrays = np.load(path)  # allow_pickle=False: a file of pickled objects is refused
                self._images, self.labels = arrays["imgs"], arrays["labels"]
                shape, dtype = self._images.shape, self._images.dtype
            else:
                with h5py.File(path, "r") as f:
                    self.labels = f["labels"][:]
                    shape, dtype = f["imgs"].shape, f["imgs"].dtype
        except (KeyError, OSError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"array dataset {path!r} is not a prepared file with arrays 'imgs' and 'labels' "
                             f"({error})") from None
        if len(shape) != 4 or shape[1] != 3 or dtype != np.uint8 or shape[0] != len(self.labels):
            raise ValueError(f"{path}: 'imgs' must be uint8 (N, 3, H, W) with N labels, got {dtype} {shape}")

    def images(self):
        if self._images is None:
            self._images = h5py.File(self.path, "r")["imgs"]
        return self._images

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return to_unit_range(torch.from_numpy(np.asarray(self.images()[index]))), int(self.labels[index])


def folder_transform(resolution: int):
    from torchvision import transforms  # ~2 s to import; the built-in digits do not need it

    return transforms.Compose(
        [
            transforms.Resize(resolution),
            transforms.CenterCrop(resolution),
            transforms.ToTensor(),
            transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        ]
    )


def build_dataset(name: str, root: str | None, resolution: int) -> Dataset:
    """The training set ``name`` (one of :data:`DATASETS`) at ``resolution``; see the module doc."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; accepted: {list(DATASETS)}")
    if name == "digits":
        return digits_dataset(resolution)
    if root is None:
        raise ValueError(f"dataset {name!r} needs --data-root (nothing is downloaded)")
    if not os.path.exists(root):
        raise FileNotFoundError(f"dataset {name!r}: path {root!r} does not exist")
    if name == "array":
        return ArrayImageDataset(root)
    from torchvision import datasets  # ~2 s to import; the built-in digits do not need it

    if name == "cifar10":
        return datasets.CIFAR10(root, train=True, transform=folder_transform(resolution), download=False)
    return datasets.ImageFolder(root, transform=folder_transform(resolution))


def num_classes_of(dataset: Dataset) -> int:
    """Number of classes: ``classes`` attribute if present, else ``max(label) + 1``."""
    if hasattr(dataset, "classes"):
        return len(dataset.classes)
    if isinstance(dataset, TensorDataset):
        return int(dataset.tensors[1].max()) + 1
    return int(np.max(dataset.labels)) + 1


class UInt8Images(Dataset):
    """The images of a training set as uint8 (3, R, R) tensors, the reference input of IS/FID."""

    def __init__(self, dataset: Dataset, limit: int | None = None) -> None:
        self.dataset = dataset
        self.length = len(dataset) if limit is None else min(limit, len(dataset))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Tensor:
        return to_uint8(self.dataset[index][0])
