"""evonorm_core.classifiers.data: the embedded digits proxy and CIFAR-10 from its folder layout, normalized,
and the in-memory dataset with the proxy task's augmentation."""
import pickle

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar as cifar

from evonorm_core.classifiers.data import TensorImages, load_cifar10, load_digits_proxy
from evonorm_core.experiment import data


def test_digits_proxy_shapes_split_and_normalization():
    train_x, train_y, val_x, val_y = load_digits_proxy(24)
    assert train_x.shape == (1438, 3, 24, 24) and val_x.shape == (359, 3, 24, 24)
    assert train_x.dtype == torch.float32 and train_y.dtype == torch.int64
    assert set(train_y.tolist()) == set(range(10)) and set(val_y.tolist()) == set(range(10))
    assert abs(train_x.mean().item()) < 1e-4 and abs(train_x.std().item() - 1) < 1e-4
    again = load_digits_proxy(24)
    assert torch.equal(again[1], train_y) and torch.equal(again[3], val_y)


def test_digits_proxy_rejects_tiny_images():
    with pytest.raises(ValueError, match="image_size"):
        load_digits_proxy(4)


def write_fake_cifar(folder, monkeypatch, per_batch=4):
    """torchvision's layout with random images; its MD5 checks (of the real files) pass for this test."""
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)
    monkeypatch.setattr(cifar.CIFAR10, "_check_integrity", lambda self: True)
    folder.mkdir(parents=True)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 "labels": list(rng.integers(0, 10, per_batch))}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)


def test_cifar10_reads_torchvision_layout(tmp_path, monkeypatch):
    write_fake_cifar(tmp_path / "cifar-10-batches-py", monkeypatch)
    train_x, train_y, val_x, val_y = load_cifar10(tmp_path)
    assert train_x.shape == (20, 3, 32, 32) and val_x.shape == (4, 3, 32, 32)
    assert train_y.dtype == torch.int64 and train_x.dtype == torch.float32
    assert torch.equal(load_cifar10(tmp_path / "cifar-10-batches-py")[1], train_y)


def test_cifar10_missing_names_path_and_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py.*data_batch_1"):
        load_cifar10(tmp_path / "missing")


def test_cifar10_normalizes_each_rgb_channel_with_the_cifar10_statistics(tmp_path, monkeypatch):
    """CIFAR-10's per-channel training-set statistics, RGB order: mean (0.4914, 0.4822, 0.4465), std
    (0.2470, 0.2435, 0.2616). The pickled rows are the R plane, then G, then B; planes of constant value
    v come out as (v / 255 - mean) / std of their own channel, in the training and the test split alike."""
    write_fake_cifar(tmp_path / "cifar-10-batches-py", monkeypatch)
    planes = (255, 0, 128)  # R, G, B
    row = np.concatenate([np.full(1024, v, dtype=np.uint8) for v in planes])
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(tmp_path / "cifar-10-batches-py" / name, "wb") as f:
            pickle.dump({"data": np.stack([row] * 4), "labels": [0, 1, 2, 3]}, f)
    train_x, _, val_x, _ = load_cifar10(tmp_path)
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    for images in (train_x, val_x):
        for channel, value in enumerate(planes):
            want = (value / 255 - mean[channel]) / std[channel]
            torch.testing.assert_close(images[:, channel], torch.full_like(images[:, channel], want))


def test_digits_validation_is_standardized_with_the_training_statistics():
    """One affine map for both splits (the training split's mean and std): the validation images are not
    re-centred on their own statistics, so mapping them back gives the raw digits of the fixed split."""
    raw = data.digits(16, channels=3)
    train_x, _, val_x, _ = load_digits_proxy(16)
    mean, std = raw.train_images.mean(), raw.train_images.std()
    torch.testing.assert_close(val_x * std + mean, raw.val_images)
    torch.testing.assert_close(train_x * std + mean, raw.train_images)
    assert abs(val_x.mean().item()) > 1e-3  # its own statistics would have made this 0


def test_tensor_images_crop_every_window_and_flip_only_when_asked():
    """Random crops are windows of the image at every offset 0..size - crop (both ends included), each
    image keeps its label; without ``flip`` no image is mirrored, with it about half are."""
    image = torch.arange(32 * 32, dtype=torch.float32).view(1, 1, 32, 32).expand(1, 3, 32, 32)
    crops = TensorImages(image, torch.tensor([7]), crop=24)
    tops, lefts = set(), set()
    for _ in range(400):
        out, label = crops[0]
        assert out.shape == (3, 24, 24) and label == 7
        top, left = divmod(int(out[0, 0, 0]), 32)
        assert torch.equal(out, image[0, :, top:top + 24, left:left + 24])
        tops.add(top)
        lefts.add(left)
    assert tops == lefts == set(range(9))
    plain = TensorImages(image, torch.tensor([7]))
    assert all(torch.equal(plain[0][0], image[0]) for _ in range(50))
    flips = TensorImages(image, torch.tensor([7]), flip=True)
    mirrored = sum(torch.equal(flips[0][0], image[0].flip(-1)) for _ in range(400))
    assert 140 < mirrored < 260
