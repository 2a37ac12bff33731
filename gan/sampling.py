"""Sampling from a trained generator: latents, standing statistics, image grids.

Batch-dependent layers (BN-ReLU, EvoNorm-B0, every ``BatchStatsNormAct2d``) sample in
eval mode from moving statistics. As BigGAN does, those statistics can instead be
recomputed for the final weights ("standing statistics", :func:`standing_statistics`):
the moving averages are replaced by the plain average of the batch statistics over
``num_batches`` fresh batches of samples. Batch-independent layers are unaffected.
"""
from __future__ import annotations

import io

import torch
from torch import Tensor, nn

from evonorm_core.experiment.files import atomic_write_bytes
from evonorm_core.running_stats import recalibrate


def sample_latents(
    num: int, dim_z: int, num_classes: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """``z ~ N(0, I)`` of shape (num, dim_z) and class labels uniform over ``num_classes``."""
    z = torch.randn(num, dim_z, generator=generator).to(device)
    y = torch.randint(num_classes, (num,), generator=generator).to(device)
    return z, y


@torch.no_grad()
def standing_statistics(generator: nn.Module, num_batches: int, batch_size: int, seed: int = 0) -> int:
    """BigGAN's standing statistics: recompute the moving averages of ``generator``'s
    batch-statistics layers as the plain average over ``num_batches`` batches of
    ``batch_size`` fresh samples (:func:`evonorm_core.running_stats.recalibrate`; only those
    layers run in train mode, so spectral-norm vectors are left alone). Returns the number of
    layers recalibrated (0 for batch-independent layers, which need nothing)."""
    if num_batches <= 0:
        return 0
    spec = generator.spec
    device = next(generator.parameters()).device
    rng = torch.Generator().manual_seed(seed)
    batches = [sample_latents(batch_size, spec.dim_z, spec.num_classes, device, rng) for _ in range(num_batches)]
    return recalibrate(generator, batches, forward=lambda g, latents: g(*latents))


def grid_latents(dim_z: int, num_classes: int, per_class: int = 8, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Fixed latents for sample grids: ``per_class`` samples of each of up to 10 classes, row by class."""
    classes = torch.linspace(0, num_classes - 1, min(num_classes, 10)).round().long()
    y = classes.repeat_interleave(per_class)
    z = torch.randn(len(y), dim_z, generator=torch.Generator().manual_seed(seed))
    return z, y


@torch.no_grad()
def save_sample_grid(generator: nn.Module, path: str, z: Tensor, y: Tensor, per_row: int = 8) -> Tensor:
    """Generate images for ``(z, y)`` in eval mode, save them as one PNG grid (one row per
    class) and return the grid (3, H, W; greyscale images are repeated over 3 channels)."""
    from torchvision.utils import make_grid, save_image  # ~2 s to import, for the sample grids only

    was_training = generator.training
    generator.eval()
    device = next(generator.parameters()).device
    images = generator(z.to(device), y.to(device))
    generator.train(was_training)
    grid = make_grid(images.float().cpu(), nrow=per_row, normalize=True, value_range=(-1, 1))
    png = io.BytesIO()
    save_image(grid, png, format="png")
    atomic_write_bytes(path, png.getvalue())
    return grid
