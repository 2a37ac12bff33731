"""Training configurations: the BigGAN-deep 128 preset of the paper and smaller ones.

Every preset keeps BigGAN-deep's optimisation recipe (Brock et al., 2019, as listed in
issue 7): Adam with betas (0, 0.999), G lr 5e-5, D lr 2e-4, 2 D steps per G step,
dim_z 128, shared_dim 128, an EMA of G's weights; ``adam_eps``, ``ema_decay`` and
``ema_start`` follow BigGAN-PyTorch's ``launch_BigGAN_deep.sh`` (1e-6, 0.9999, 20000).
Presets differ in data and scale only, except ``digits``, the CPU demo, which raises the
learning rates and shortens the EMA so that a few hundred steps show learning.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from evonorm_core import resolve_name


@dataclass
class TrainConfig:
    dataset: str = "imagenet"
    data_root: str | None = None
    resolution: int = 128
    channels: int = 128
    dim_z: int = 128
    shared_dim: int = 128
    depth: int = 2
    attention: tuple[int, ...] = (64,)
    norm: str = "bn_relu"
    norm_options: dict = field(default_factory=dict)
    g_lr: float = 5e-5
    d_lr: float = 2e-4
    betas: tuple[float, float] = (0.0, 0.999)
    adam_eps: float = 1e-6
    d_steps: int = 2
    batch_size: int = 2048  # images per optimizer step, over all processes and accumulations
    micro_batch: int = 256  # images per forward pass on one process
    total_steps: int = 500_000  # a cap: the paper reports each run at its peak (evaluate snapshots)
    ema_decay: float = 0.9999
    ema_start: int = 20_000
    seed: int = 0
    num_workers: int = 8
    log_every: int = 100
    sample_every: int = 2_000
    save_every: int = 1_000
    keep_every: int = 10_000  # a full snapshot kept every this many steps (0: none)

    def accumulation(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each process; raises if the batch does not split."""
        per_step = self.micro_batch * world_size
        if self.batch_size % per_step:
            raise ValueError(
                f"batch_size={self.batch_size} is not a multiple of micro_batch x processes = "
                f"{self.micro_batch} x {world_size}"
            )
        return self.batch_size // per_step

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        values = dict(values)
        for key in ("attention", "betas"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)


PRESETS: dict[str, dict] = {
    # BigGAN-deep 128 on ImageNet (paper Table 5): batch 2048 = 8 GPUs x 256 or accumulation.
    "imagenet128": {},
    "cifar10": dict(
        dataset="cifar10", resolution=32, channels=64, batch_size=256, micro_batch=64, total_steps=100_000,
        ema_start=1_000, attention=(),
    ),
    # The built-in CPU demo on scikit-learn's digits: a few minutes on 2 cores.
    "digits": dict(
        dataset="digits", resolution=32, channels=16, batch_size=16, micro_batch=16, total_steps=300,
        g_lr=2e-4, d_lr=2e-4, ema_decay=0.99, ema_start=50, num_workers=0, log_every=10, sample_every=100,
        save_every=100, keep_every=0, attention=(),
    ),
}

# GN-ReLU uses 16 groups in the paper's Table 5 (8, 16 and 32 were swept).
NORM_DEFAULT_OPTIONS = {"gn_relu": {"groups": 16}}


def make_config(preset: str, **overrides) -> TrainConfig:
    """The preset ``preset`` with ``overrides`` (``None`` values ignored) and the norm's default options."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; accepted: {sorted(PRESETS)}")
    values = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    config = TrainConfig.from_dict(values)
    config.norm = resolve_name(config.norm)
    config.norm_options = {**NORM_DEFAULT_OPTIONS.get(config.norm, {}), **config.norm_options}
    return config
