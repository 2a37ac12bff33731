"""classification.imagenet: the ImageNet training and evaluation transforms and their loader."""
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import functional as TF

from evonorm_suite.classification import imagenet
from evonorm_suite.classification.imagenet import IMAGENET_MEAN, IMAGENET_STD, imagenet_transforms


@pytest.mark.parametrize("resolution,resize", [(224, 256), (32, 37)])
def test_imagenet_evaluation_resizes_to_resolution_over_0875_then_center_crops(resolution, resize):
    """The standard ImageNet evaluation (ResNet, the paper's baselines): resize the shorter side to
    resolution / 0.875 (256 for 224), then take the center resolution x resolution crop; compared
    with those two steps done by hand with torchvision's functional ops."""
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
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    for colour, expected in ((mean, 0.0), (mean + std, 1.0)):
        pixels = np.round(np.broadcast_to(colour * 255, (40, 40, 3))).astype(np.uint8)
        out = imagenet_transforms(32, train=False)(Image.fromarray(pixels))
        assert out.shape == (3, 32, 32)
        torch.testing.assert_close(out, torch.full_like(out, expected), atol=0.01, rtol=0)


def test_imagenet_training_transform_is_inception_crop_flip_and_randaugment_2_9():
    """Training: RandomResizedCrop to the resolution at torchvision's Inception scale (0.08, 1) and aspect
    (3/4, 4/3), horizontal flip with p 0.5, RandAugment with 2 ops at magnitude 9 (Tables 10-12, as
    Cubuk et al.'s ResNet-50 setting) only when asked, then the ImageNet RGB normalization."""
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
    seen = {}

    def fake_imagenet(root, train_transform, eval_transform, holdout_fraction, seed):
        seen.update(root=root, train=train_transform, eval=eval_transform, holdout=holdout_fraction, seed=seed)
        return "train", "val"

    monkeypatch.setattr(imagenet.data, "imagenet", fake_imagenet)
    loaded = imagenet.load_imagenet("/in", 128, randaugment=True, holdout_fraction=0.1, seed=5)
    assert loaded == ("train", "val")
    assert (seen["root"], seen["holdout"], seen["seed"]) == ("/in", 0.1, 5)
    train_steps = [type(t) for t in seen["train"].transforms]
    assert train_steps[:3] == [T.RandomResizedCrop, T.RandomHorizontalFlip, T.RandAugment]
    assert seen["train"].transforms[0].size == (128, 128)
    assert [type(t) for t in seen["eval"].transforms][:2] == [T.Resize, T.CenterCrop]
    assert seen["eval"].transforms[1].size == (128, 128)
    imagenet.load_imagenet("/in", 128)
    assert T.RandAugment not in [type(t) for t in seen["train"].transforms] and seen["holdout"] == 0.0
