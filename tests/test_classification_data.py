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
    from evonorm_core.experiment import data

    raw = data.digits(16, channels=3)
    train_x, _, val_x, _ = load_digits_proxy(16)
    mean, std = raw.train_images.mean(), raw.train_images.std()
    torch.testing.assert_close(val_x * std + mean, raw.val_images)
    torch.testing.assert_close(train_x * std + mean, raw.train_images)
    assert abs(val_x.mean().item()) > 1e-3  # its own statistics would have made this 0


def test_tensor_images_crop_every_window_and_flip_only_when_asked():
    """Random crops are windows of the image at every offset 0..size - crop (both ends included), each
    image keeps its label; without ``flip`` no image is mirrored, with it about half are."""
    from classification.data import TensorImages

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


def test_imagenet_training_transform_is_inception_crop_flip_and_randaugment_2_9():
    """Training: RandomResizedCrop to the resolution at torchvision's Inception scale (0.08, 1) and aspect
    (3/4, 4/3), horizontal flip with p 0.5, RandAugment with 2 ops at magnitude 9 (Tables 10-12, as
    Cubuk et al.'s ResNet-50 setting) only when asked, then the ImageNet RGB normalization."""
    from torchvision import transforms as T

    from classification.data import IMAGENET_MEAN, IMAGENET_STD

    for randaugment in (False, True):
        steps = imagenet_transforms(160, train=True, randaugment=randaugment).transforms
        kinds = [type(t) for t in steps]
        expected = [T.RandomResizedCrop, T.RandomHorizontalFlip, *([T.RandAugment] if randaugment else []),
                    T.ToTensor, T.Normalize]
        assert kinds == expected
        crop, flip, normalize = steps[0], steps[1], steps[-1]
        assert crop.size == (160, 160) and crop.scale == (0.08, 1.0)
        assert crop.ratio == pytest.approx((3 / 4, 4 / 3))
        assert flip.p == 0.5
        assert tuple(normalize.mean) == IMAGENET_MEAN == (0.485, 0.456, 0.406)
        assert tuple(normalize.std) == IMAGENET_STD == (0.229, 0.224, 0.225)
        if randaugment:
            assert (steps[2].num_ops, steps[2].magnitude) == (2, 9)


def test_load_imagenet_gives_training_the_augmenting_transform_and_validation_the_plain_one(monkeypatch):
    """The train split gets the random-crop transform (with RandAugment when asked), the validation split
    the resize + center crop one; the hold-out fraction and seed reach the split."""
    from torchvision import transforms as T

    from classification import data as classification_data

    seen = {}

    def fake_imagenet(root, train_transform, eval_transform, holdout_fraction, seed):
        seen.update(root=root, train=train_transform, eval=eval_transform, holdout=holdout_fraction, seed=seed)
        return "train", "val"

    monkeypatch.setattr(classification_data.data, "imagenet", fake_imagenet)
    loaded = classification_data.load_imagenet("/in", 128, randaugment=True, holdout_fraction=0.1, seed=5)
    assert loaded == ("train", "val")
    assert (seen["root"], seen["holdout"], seen["seed"]) == ("/in", 0.1, 5)
    train_steps = [type(t) for t in seen["train"].transforms]
    assert train_steps[:3] == [T.RandomResizedCrop, T.RandomHorizontalFlip, T.RandAugment]
    assert seen["train"].transforms[0].size == (128, 128)
    assert [type(t) for t in seen["eval"].transforms][:2] == [T.Resize, T.CenterCrop]
    assert seen["eval"].transforms[1].size == (128, 128)
    classification_data.load_imagenet("/in", 128)
    assert T.RandAugment not in [type(t) for t in seen["train"].transforms] and seen["holdout"] == 0.0
