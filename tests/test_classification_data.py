"""Data loaders: the embedded digits proxy and CIFAR-10 from its folder layout."""
import pickle

import numpy as np
import pytest
import torch

from classification.data import imagenet_transforms, load_cifar10, load_digits_proxy


def test_digits_proxy_shapes_split_and_normalization():
    train_x, train_y, val_x, val_y = load_digits_proxy(24)
    assert train_x.shape == (1438, 3, 24, 24) and val_x.shape == (359, 3, 24, 24)
    assert train_x.dtype == torch.float32 and train_y.dtype == torch.int64
    assert set(train_y.tolist()) == set(range(10)) and set(val_y.tolist()) == set(range(10))
    assert abs(train_x.mean().item()) < 1e-4 and abs(train_x.std().item() - 1) < 1e-4
    again = load_digits_proxy(24)
    assert torch.equal(again[1], train_y) and torch.equal(again[3], val_y)


def test_rerank_holdout_is_a_tenth_of_the_training_set_kept_out_of_training():
    """Appendix C, reranking: "trained using 90% of the ImageNet training set and evaluated over the rest of
    the 10%": the two parts split the training images (the validation set is not used)."""
    from search.proxy import load_data

    train_x = load_digits_proxy(8)[0]
    fit_x, _, held_x, _ = load_data("digits", None, 8, holdout=True)
    assert len(held_x) == round(0.1 * len(train_x)) and len(fit_x) + len(held_x) == len(train_x)
    rows = lambda t: sorted(tuple(r) for r in t.flatten(1).tolist())  # noqa: E731
    assert rows(torch.cat([fit_x, held_x])) == rows(train_x)  # each training image in exactly one part


def test_digits_proxy_rejects_tiny_images():
    with pytest.raises(ValueError, match="image_size"):
        load_digits_proxy(4)


def write_fake_cifar(folder, monkeypatch, per_batch=4):
    """torchvision's layout with random images; its MD5 checks (of the real files) pass for this test."""
    import torchvision.datasets.cifar as cifar

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


@pytest.mark.parametrize("resolution,resize", [(224, 256), (32, 37)])
def test_imagenet_evaluation_resizes_to_resolution_over_0875_then_center_crops(resolution, resize):
    """The standard ImageNet evaluation (ResNet, the paper's baselines): resize the shorter side to
    resolution / 0.875 (256 for 224), then take the center resolution x resolution crop; compared
    with those two steps done by hand with torchvision's functional ops."""
    pytest.importorskip("torchvision")
    from PIL import Image
    from torchvision.transforms import functional as TF

    from classification.data import IMAGENET_MEAN, IMAGENET_STD, imagenet_transforms

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8))  # 400 wide, 300 high
    resized = TF.resize(image, resize)
    assert min(resized.size) == resize
    want = TF.normalize(TF.to_tensor(TF.center_crop(resized, resolution)), IMAGENET_MEAN, IMAGENET_STD)
    got = imagenet_transforms(resolution, train=False)(image)
    assert got.shape == (3, resolution, resolution)
    torch.testing.assert_close(got, want)


def test_imagenet_eval_transform_normalizes_rgb_with_the_imagenet_statistics():
    """torchvision's ImageNet statistics, RGB order: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225).
    An image of the mean colour becomes 0, one a std brighter per channel becomes 1 (up to uint8 rounding)."""
    from PIL import Image

    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    for colour, expected in ((mean, 0.0), (mean + std, 1.0)):
        pixels = np.round(np.broadcast_to(colour * 255, (40, 40, 3))).astype(np.uint8)
        out = imagenet_transforms(32, train=False)(Image.fromarray(pixels))
        assert out.shape == (3, 32, 32)
        torch.testing.assert_close(out, torch.full_like(out, expected), atol=0.01, rtol=0)
