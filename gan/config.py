"""BigGAN-deep training configurations: one frozen dataclass, presets as instances of it.

Every preset keeps BigGAN-deep's optimisation recipe (Brock et al., 2019; the paper trains
BigGAN-deep 128 unchanged and swaps the generator's BN-ReLU): Adam with betas (0, 0.999),
G lr 5e-5, D lr 2e-4, 2 D steps per G step, batch 2048, dim_z 128, shared_dim 128, an EMA of
G's weights; ``adam_eps``, ``ema_decay`` and ``ema_start`` follow BigGAN-PyTorch's
``launch_BigGAN_deep.sh`` (1e-6, 0.9999, 20000). ``imagenet128`` is that setup;
``cifar10`` shrinks data and width only; ``digits``, the built-in CPU default, is sized by
measurement to learn the embedded digits within minutes (docs/gan.md says how it was chosen).
"""
from __future__ import annotations

from dataclasses import dataclass

from evonorm_core import norm_act_options, resolve_name, uses_batch_statistics
from evonorm_core.experiment.arguments import MAX_SEED
from evonorm_core.experiment.config import ConfigError, option, validate
from evonorm_core.registry import options_of
from evonorm_suite.gan.biggan_deep import RESOLUTIONS
from evonorm_suite.gan.data import DATASETS


@dataclass(frozen=True)
class GanConfig:
    """Everything a BigGAN-deep run depends on; saved as ``config.json`` beside its outputs."""

    dataset: str = option("imagenet", "training data (digits: the embedded scikit-learn digits)", choices=DATASETS)
    data_root: str | None = option(None, "dataset folder, or the .npz/.hdf5 file for --dataset array", resumable=True)
    resolution: int = option(128, "image size", choices=RESOLUTIONS)
    image_channels: int = option(3, "channels of the images (1: greyscale)", choices=(1, 3))
    channels: int = option(128, "channel width multiplier of G and D (BigGAN's ch)", min=8)
    dim_z: int = option(128, "latent size", min=1)
    shared_dim: int = option(128, "size of the shared class embedding", min=1)
    depth: int = option(2, "residual blocks per resolution stage", min=1)
    attention: tuple[int, ...] = option((64,), "resolutions with self-attention (none: no attention)",
                                        choices=(8, 16, 32, 64, 128))
    norm: str = option("bn_relu", "generator norm-act (any registered layer)")
    groups: int | None = option(None, "groups of grouped layers (GN, EvoNorm-S; none: GN-ReLU 16 as in Table 5, "
                                "EvoNorm-S 32 lowered to divide the width); layers without groups ignore it", min=1)
    sync_batch_stats: bool = option(False, "batch statistics over all processes (cross-replica BN; batch layers only)")
    g_lr: float = option(5e-5, "generator learning rate", min=0, min_open=True)
    d_lr: float = option(2e-4, "discriminator learning rate", min=0, min_open=True)
    betas: tuple[float, ...] = option((0.0, 0.999), "Adam betas (two values in [0, 1))", min=0, max=1, max_open=True)
    adam_eps: float = option(1e-6, "Adam epsilon", min=0, min_open=True)
    d_steps: int = option(2, "D steps per G step", min=1)
    batch_size: int = option(2048, "images per optimizer step over all processes and accumulations", min=1)
    micro_batch: int = option(256, "images per forward pass and process (accumulation fills the rest)", min=1)
    total_steps: int = option(500_000, "G steps to train (the paper reports each run at its peak)", min=1,
                              resumable=True)
    ema_decay: float = option(0.9999, "EMA decay of G's weights", min=0, max=1, max_open=True)
    ema_start: int = option(20_000, "step from which the EMA averages (before: a copy)", min=0)
    seed: int = option(0, "seed of initialization, data order and latents", min=0, max=MAX_SEED)
    num_workers: int = option(8, "data loader processes", min=0, resumable=True)
    log_every: int = option(100, "steps between progress lines and TensorBoard scalars", min=1, resumable=True)
    sample_every: int = option(2_000, "steps between PNG sample grids", min=1, resumable=True)
    eval_every: int = option(0, "steps between digits-classifier IS/FID on the progress line (0: never)", min=0,
                             resumable=True)
    eval_samples: int = option(500, "samples for the in-training IS/FID", min=10, resumable=True)
    save_every: int = option(1_000, "steps between checkpoints/last.pt updates", min=1, resumable=True)
    keep_every: int = option(10_000, "steps between kept snapshots step_N.pt (0: none)", min=0, resumable=True)

    def __post_init__(self) -> None:
        validate(self)
        try:
            object.__setattr__(self, "norm", resolve_name(self.norm))
        except ValueError as error:
            raise ConfigError(f"--norm: {error}") from None
        if len(self.betas) != 2:
            raise ConfigError(f"--betas takes two values, got {self.betas}")
        if self.channels % 8:
            raise ConfigError(f"--channels must be a multiple of 8 (self-attention uses channels / 8), got {self.channels}")
        stages = sorted(self.resolution >> k for k in range(self.resolution.bit_length()) if self.resolution >> k >= 8)
        ignored = sorted(set(self.attention) - set(stages))
        if ignored:  # the models would build no attention there, and say nothing
            raise ConfigError(f"--attention {' '.join(map(str, ignored))}: not the resolution of a stage at "
                              f"{self.resolution} px; accepted: {' '.join(map(str, stages))} (none: no attention)")

    def accumulation(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each process; raises if the batch does not split."""
        per_step = self.micro_batch * world_size
        if self.batch_size % per_step:
            raise ConfigError(f"--batch-size {self.batch_size} is not a multiple of --micro-batch x processes = "
                              f"{self.micro_batch} x {world_size}")
        return self.batch_size // per_step

    @property
    def norm_options(self) -> dict:
        """Options of the generator's layer: groups for a layer that has them (GN-ReLU: 16 unless set, as Table 5),
        sync for batch-statistics layers."""
        groups = self.groups if self.groups is not None else (16 if self.norm == "gn_relu" else None)
        grouped = "groups" in options_of(self.norm)
        return norm_act_options(groups=groups if grouped else None,
                                sync=self.sync_batch_stats and uses_batch_statistics(self.norm))


PRESETS: dict[str, GanConfig] = {
    # BigGAN-deep 128 on ImageNet (paper Table 5): batch 2048 = 8 GPUs x 256 or accumulation;
    # batch statistics of BN-ReLU / EvoNorm-B0 synchronized over all processes (BigGAN's cross-replica BN).
    "imagenet128": GanConfig(sync_batch_stats=True),
    "cifar10": GanConfig(dataset="cifar10", resolution=32, channels=64, batch_size=256, micro_batch=64,
                         total_steps=100_000, ema_start=1_000, attention=()),
    # digits: G's layers are 64 (stages) and 16 channels wide (bottlenecks); 8 groups (one of the counts the paper swept
    # for GN-ReLU) leave every grouped layer 2 or 8 channels per group, where GN's 16 and EvoNorm-S's 32 groups would
    # make the 16-channel layers instance norms (docs/gan.md, "Widths and groups").
    "digits": GanConfig(
        dataset="digits", resolution=16, image_channels=1, channels=16, dim_z=64, shared_dim=64, attention=(), groups=8,
        g_lr=2e-4, d_lr=2e-4, d_steps=2, batch_size=64, micro_batch=64, total_steps=2000, ema_decay=0.99,
        ema_start=50, num_workers=0, log_every=25, sample_every=250, eval_every=250, save_every=250, keep_every=0,
    ),
}
PRESET_OF_DATASET = {"digits": "digits", "cifar10": "cifar10", "imagenet": "imagenet128", "array": "imagenet128"}


def preset(name: str) -> GanConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}")
    return PRESETS[name]


