"""Local datasets (prepared arrays, image folders), errors, and a two-process DDP run via torchrun."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from evonorm_core.experiment.files import load_checkpoint
from evonorm_suite.gan.data import UInt8Images, build_dataset, num_classes_of, to_uint8, to_unit_range


def test_prepared_npz_dataset(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, size=(6, 3, 32, 32), dtype=np.uint8)
    np.savez(tmp_path / "I32.npz", imgs=images, labels=np.array([0, 1, 2, 0, 1, 4]))
    dataset = build_dataset("array", str(tmp_path / "I32.npz"), 32)
    x, y = dataset[5]
    assert x.shape == (3, 32, 32) and y == 4 and num_classes_of(dataset) == 5
    torch.testing.assert_close(to_uint8(x), torch.from_numpy(images[5]))  # exact round trip
    assert UInt8Images(dataset, limit=4)[3].dtype == torch.uint8 and len(UInt8Images(dataset, limit=4)) == 4


def test_prepared_hdf5_dataset_reads_lazily(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, size=(5, 3, 16, 16), dtype=np.uint8)
    with h5py.File(tmp_path / "I16.hdf5", "w") as f:
        f["imgs"], f["labels"] = images, np.array([3, 1, 0, 2, 1])
    dataset = build_dataset("array", str(tmp_path / "I16.hdf5"), 16)
    assert len(dataset) == 5 and num_classes_of(dataset) == 4
    x, y = dataset[0]
    assert y == 3
    torch.testing.assert_close(to_uint8(x), torch.from_numpy(images[0]))
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f["imgs"], f["labels"] = images.astype(np.float32), np.zeros(5)
    with pytest.raises(ValueError, match="uint8"):
        build_dataset("array", str(tmp_path / "bad.h5"), 16)


def test_image_folder_is_resized_and_center_cropped(tmp_path):
    for wnid in ("n01", "n02"):
        os.makedirs(tmp_path / wnid)
        Image.fromarray(np.full((40, 60, 3), 200, np.uint8)).save(tmp_path / wnid / "a.png")
    dataset = build_dataset("imagenet", str(tmp_path), 32)
    x, y = dataset[1]
    assert x.shape == (3, 32, 32) and y == 1 and num_classes_of(dataset) == 2
    torch.testing.assert_close(x, torch.full_like(x, float(to_unit_range(torch.tensor(200)))), atol=0.01, rtol=0)


def test_embedded_digits_span_the_generators_tanh_range():
    """G ends in tanh, so real images must be in [-1, 1] with the background at -1 and full ink at +1
    (in [0, 1] D would tell real from fake by range alone)."""
    images = build_dataset("digits", None, 16).tensors[0]
    assert images.min() == -1 and images.max() == 1
    assert (images == -1).float().mean() > 0.2  # the digits' background (about 30% of the pixels)


def test_dataset_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="accepted"):
        build_dataset("mnist", None, 32)
    with pytest.raises(ValueError, match="--data-root"):
        build_dataset("imagenet", None, 128)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_dataset("cifar10", str(tmp_path / "nope"), 32)
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(ValueError, match=".npz"):
        build_dataset("array", str(tmp_path / "x.txt"), 32)


@pytest.mark.slow
def test_torchrun_two_processes_with_synchronized_batch_statistics(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "..", "gan", "train_biggan.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", script, "--run-dir",
               str(tmp_path), "--channels", "8", "--batch-size", "16", "--micro-batch", "8", "--total-steps", "1",
               "--threads", "1", "--norm", "evonorm_b0", "--sync-batch-stats", "--eval-every", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1/1 steps" in result.stdout
    state = load_checkpoint(tmp_path / "seed0" / "checkpoints" / "last.pt")
    assert state["step"] == 1 and state["config"]["sync_batch_stats"] is True


def test_unit_range_and_uint8_conversions_by_hand():
    """uint8 [0, 255] <-> [-1, 1] (G's tanh range; torch-fidelity takes uint8): 0 -> -1, 255 -> 1, 51 -> -0.6;
    back: clamped to [-1, 1], rounded (0 -> 127.5 -> 128), uint8."""
    torch.testing.assert_close(to_unit_range(torch.tensor([0, 255, 51], dtype=torch.uint8)),
                               torch.tensor([-1.0, 1.0, -0.6]))
    out = to_uint8(torch.tensor([-1.0, 1.0, 0.0, -2.0, 2.0, 0.999, -0.999, 0.5]))
    assert out.dtype == torch.uint8 and out.tolist() == [0, 255, 128, 0, 255, 255, 0, 191]  # 0.5: 191.25


def test_image_folder_resizes_the_shorter_side_then_crops_the_center(tmp_path):
    """BigGAN's preprocessing: 40x60 -> 32x48 -> the central 32x32; the outer 8 of 60 columns (black) are cut
    away, so nothing of them is left (squashing to 32x32 instead would keep them)."""
    image = np.full((40, 60, 3), 255, np.uint8)
    image[:, :8] = image[:, -8:] = 0
    os.makedirs(tmp_path / "n01")
    Image.fromarray(image).save(tmp_path / "n01" / "a.png")
    x, _ = build_dataset("imagenet", str(tmp_path), 32)[0]
    assert x.shape == (3, 32, 32) and x.min() > 0.9


def test_prepared_arrays_must_be_n_3_h_w_with_a_label_each(tmp_path):
    good = np.zeros((4, 3, 8, 8), np.uint8)
    for name, images, labels in (("hwc", np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4)),
                                 ("few_labels", good, np.zeros(3)),
                                 ("flat", np.zeros((4, 3, 64), np.uint8), np.zeros(4))):
        np.savez(tmp_path / f"{name}.npz", imgs=images, labels=labels)
        with pytest.raises(ValueError, match=r"uint8 \(N, 3, H, W\) with N labels"):
            build_dataset("array", str(tmp_path / f"{name}.npz"), 8)


def test_uint8_reference_images_and_limits(tmp_path):
    images = np.arange(2 * 3 * 2 * 2, dtype=np.uint8).reshape(2, 3, 2, 2)
    np.savez(tmp_path / "a.npz", imgs=images, labels=np.array([1, 0]))
    dataset = build_dataset("array", str(tmp_path / "a.npz"), 2)
    assert len(UInt8Images(dataset)) == 2 and len(UInt8Images(dataset, limit=5)) == 2
    assert torch.equal(UInt8Images(dataset)[1], torch.from_numpy(images[1]))
