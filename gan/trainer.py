"""BigGAN-deep training: hinge loss, 2 D steps per G step, gradient accumulation, EMA, DDP.

One optimizer step of D (repeated ``d_steps`` times) and of G each see ``batch_size``
images, split into ``micro_batch`` forward passes per process (``torchrun`` processes
each take an equal share; gradients are all-reduced on the last micro-batch only).
Rank 0 writes TensorBoard scalars, sample grids and checkpoints.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .checkpoint import LAST, build_discriminator, build_generator, checkpoint_dir, load_checkpoint, save_atomic
from .config import TrainConfig
from .data import num_classes_of
from .ema import EMA
from .losses import discriminator_hinge_loss, generator_hinge_loss
from .sampling import grid_latents, sample_latents, save_sample_grid


@dataclasses.dataclass
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistributedContext:
    """Join the ``torchrun`` process group if there is one (NCCL on GPUs, Gloo on the CPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return DistributedContext(dist.get_rank() if world_size > 1 else 0, world_size, device)


def infinite_batches(dataset: Dataset, config: TrainConfig, ctx: DistributedContext) -> Iterator[tuple[Tensor, Tensor]]:
    """Shuffled micro-batches forever, each process its own shard, reshuffled every epoch."""
    sampler = (
        DistributedSampler(dataset, ctx.world_size, ctx.rank, shuffle=True, seed=config.seed, drop_last=True)
        if ctx.world_size > 1
        else None
    )
    loader = DataLoader(
        dataset,
        batch_size=config.micro_batch,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=config.num_workers,
        pin_memory=ctx.device.type == "cuda",
        persistent_workers=config.num_workers > 0,
    )
    if len(loader) == 0:
        raise ValueError(f"dataset of {len(dataset)} images is smaller than micro_batch={config.micro_batch}")
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield x.to(ctx.device, non_blocking=True), y.to(ctx.device, non_blocking=True)
        epoch += 1


def format_duration(seconds: float) -> str:
    """``[Nd ]HH:MM:SS``; paper-scale runs take days."""
    days, rest = divmod(int(seconds), 86_400)
    clock = time.strftime("%H:%M:%S", time.gmtime(rest))
    return f"{days}d {clock}" if days else clock


def sync_on_last(model: nn.Module, index: int, count: int):
    """DDP's ``no_sync`` for all but the last of ``count`` accumulated micro-batches."""
    if isinstance(model, DistributedDataParallel) and index < count - 1:
        return model.no_sync()
    return contextlib.nullcontext()


class Trainer:
    """Owns G, D, G_ema, their optimizers and the step counter; :meth:`train` runs to ``total_steps``."""

    def __init__(self, config: TrainConfig, dataset: Dataset, run_dir: str, ctx: DistributedContext | None = None):
        self.config = config
        self.run_dir = run_dir
        self.ctx = ctx or DistributedContext()
        self.accumulation = config.accumulation(self.ctx.world_size)
        self.num_classes = num_classes_of(dataset)
        torch.manual_seed(config.seed)
        self.generator = build_generator(config, self.num_classes).to(self.ctx.device)
        self.discriminator = build_discriminator(config, self.num_classes).to(self.ctx.device)
        self.ema = EMA(self.generator, config.ema_decay, config.ema_start)
        self.opt_g = self._adam(self.generator, config.g_lr)
        self.opt_d = self._adam(self.discriminator, config.d_lr)
        self.g_train, self.d_train = self._wrap(self.generator), self._wrap(self.discriminator)
        self.batches = infinite_batches(dataset, config, self.ctx)
        self.step = 0
        self.latent_rng = torch.Generator()
        self._seed_latents()

    def _seed_latents(self) -> None:
        """Seed the latent RNG from (seed, rank, step): distinct per process, reproducible on resume."""
        self.latent_rng.manual_seed(self.config.seed * 1_000_003 + self.ctx.rank * 10_007 + self.step)

    def _adam(self, model: nn.Module, lr: float) -> torch.optim.Adam:
        return torch.optim.Adam(model.parameters(), lr=lr, betas=self.config.betas, eps=self.config.adam_eps)

    def _wrap(self, model: nn.Module) -> nn.Module:
        if self.ctx.world_size == 1:
            return model
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def _latents(self) -> tuple[Tensor, Tensor]:
        return sample_latents(
            self.config.micro_batch, self.config.dim_z, self.num_classes, self.ctx.device, self.latent_rng
        )

    def discriminator_step(self) -> dict[str, float]:
        self.opt_d.zero_grad(set_to_none=True)
        totals = {"loss_d": 0.0, "d_real": 0.0, "d_fake": 0.0}
        for index in range(self.accumulation):
            x, y = next(self.batches)
            z, y_fake = self._latents()
            with torch.no_grad():
                fake = self.g_train(z, y_fake)
            with sync_on_last(self.d_train, index, self.accumulation):
                logits = self.d_train(torch.cat([x, fake]), torch.cat([y, y_fake]))
                real_logits, fake_logits = logits.split([len(x), len(fake)])
                loss = discriminator_hinge_loss(real_logits, fake_logits)
                (loss / self.accumulation).backward()
            for key, value in zip(totals, (loss, real_logits.mean(), fake_logits.mean())):
                totals[key] += value.item() / self.accumulation
        self.opt_d.step()
        return totals

    def generator_step(self) -> dict[str, float]:
        self.opt_g.zero_grad(set_to_none=True)
        self.discriminator.requires_grad_(False)  # D is not updated here: unwrapped, no gradients
        total = 0.0
        for index in range(self.accumulation):
            z, y = self._latents()
            with sync_on_last(self.g_train, index, self.accumulation):
                loss = generator_hinge_loss(self.discriminator(self.g_train(z, y), y))
                (loss / self.accumulation).backward()
            total += loss.item() / self.accumulation
        self.discriminator.requires_grad_(True)
        self.opt_g.step()
        return {"loss_g": total}

    def train_step(self) -> dict[str, float]:
        """``d_steps`` D updates, one G update, one EMA update; returns the step's scalars."""
        self.generator.train()
        self.discriminator.train()
        scalars: dict[str, float] = {}
        for _ in range(self.config.d_steps):
            scalars = self.discriminator_step()  # the last D step's values are logged
        scalars.update(self.generator_step())
        self.step += 1
        self.ema.update(self.generator, self.step)
        if not all(math.isfinite(v) for v in scalars.values()):
            raise FloatingPointError(f"non-finite loss at step {self.step}: {scalars}")
        return scalars

    def state_dict(self) -> dict:
        return {
            "config": dataclasses.asdict(self.config),
            "num_classes": self.num_classes,
            "step": self.step,
            "G": self.generator.state_dict(),
            "D": self.discriminator.state_dict(),
            "G_ema": self.ema.model.state_dict(),
            "opt_g": self.opt_g.state_dict(),
            "opt_d": self.opt_d.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.generator.load_state_dict(state["G"])
        self.discriminator.load_state_dict(state["D"])
        self.ema.model.load_state_dict(state["G_ema"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
        self.step = state["step"]
        self._seed_latents()

    def save(self) -> None:
        if not self.ctx.is_main:
            return
        state = self.state_dict()
        save_atomic(state, os.path.join(checkpoint_dir(self.run_dir), LAST))
        if self.config.keep_every and self.step % self.config.keep_every == 0:
            save_atomic(state, os.path.join(checkpoint_dir(self.run_dir), f"step_{self.step:07d}.pt"))

    def resume(self) -> bool:
        """Load ``last.pt`` of the run directory if it exists; returns whether it did."""
        path = os.path.join(checkpoint_dir(self.run_dir), LAST)
        if not os.path.isfile(path):
            return False
        self.load_state_dict(load_checkpoint(path))
        return True

    def train(self) -> dict[str, float]:
        """Train to ``total_steps``, logging, sampling and checkpointing on the way; returns the last scalars."""
        config, main = self.config, self.ctx.is_main
        writer = self._writer() if main else None
        grid = grid_latents(config.dim_z, self.num_classes)
        start_step, start_time, scalars = self.step, time.time(), {}
        while self.step < config.total_steps:
            scalars = self.train_step()
            if main and (self.step % config.log_every == 0 or self.step == config.total_steps):
                self._log(writer, scalars, start_step, start_time)
            if main and (self.step % config.sample_every == 0 or self.step == config.total_steps):
                path = os.path.join(self.run_dir, "samples", f"step_{self.step:07d}.png")
                writer.add_image("samples/G_ema", save_sample_grid(self.ema.model, path, *grid), self.step)
            if self.step % config.save_every == 0 or self.step == config.total_steps:
                self.save()
        if writer is not None:
            writer.close()
        return scalars

    def _writer(self):
        from torch.utils.tensorboard import SummaryWriter

        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.run_dir, "config.json"), "w") as f:
            f.write(json.dumps({**dataclasses.asdict(self.config), "num_classes": self.num_classes}, indent=2))
        return SummaryWriter(os.path.join(self.run_dir, "tb"))

    def _log(self, writer, scalars: dict[str, float], start_step: int, start_time: float) -> None:
        elapsed = time.time() - start_time
        rate = (self.step - start_step) / max(elapsed, 1e-9)
        eta = (self.config.total_steps - self.step) / max(rate, 1e-9)
        for key, value in scalars.items():
            writer.add_scalar(f"train/{key}", value, self.step)
        writer.add_scalar("train/steps_per_s", rate, self.step)
        values = " ".join(f"{k} {v:+.3f}" for k, v in scalars.items())
        print(
            f"step {self.step}/{self.config.total_steps} | {values} | {rate:.2f} step/s "
            f"({rate * self.config.batch_size:.0f} img/s) | ETA {format_duration(eta)}",
            flush=True,
        )
