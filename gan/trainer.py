"""BigGAN-deep training: hinge loss, 2 D steps per G step, gradient accumulation, EMA, DDP.

One optimizer step of D (repeated ``d_steps`` times) and of G each see ``batch_size``
images, split into ``micro_batch`` forward passes per process (``torchrun`` processes
each take an equal share; gradients are all-reduced on the last micro-batch only).
Rank 0 writes TensorBoard scalars, sample grids and checkpoints.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torch.utils.tensorboard import SummaryWriter

from evonorm_core.experiment.config import ConfigError, config_to_dict
from evonorm_core.experiment.distributed import DistributedContext
from evonorm_core.experiment.files import (
    CorruptFileError,
    append_jsonl,
    atomic_write_text,
    load_checkpoint,
    read_jsonl,
    require_keys,
    save_checkpoint,
)
from evonorm_core.experiment.progress import Progress
from evonorm_core.experiment.rundir import open_run
from evonorm_core.experiment.stopping import stop_signals_after_block
from evonorm_core.experiment.tables import Series, plot_series
from evonorm_suite.gan.checkpoint import (
    LAST,
    RUN_KIND,
    build_discriminator,
    build_generator,
    checkpoint_dir,
    resume_point,
)
from evonorm_suite.gan.config import GanConfig
from evonorm_suite.gan.data import num_classes_of
from evonorm_suite.gan.ema import EMA
from evonorm_suite.gan.losses import discriminator_hinge_loss, generator_hinge_loss
from evonorm_suite.gan.sampling import grid_latents, sample_latents, save_sample_grid, standing_statistics

LOG_FILE = "log.jsonl"


def infinite_batches(dataset: Dataset, config: GanConfig, ctx: DistributedContext) -> Iterator[tuple[Tensor, Tensor]]:
    """Shuffled micro-batches forever, each process its own shard, reshuffled every epoch. A micro-batch
    larger than the process's shard is a :class:`ConfigError` now, before the first batch is asked for."""
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
        shard = f"the {len(sampler)} images each of {ctx.world_size} processes gets" if sampler else "the dataset"
        raise ConfigError(f"--micro-batch {config.micro_batch} is more than {shard} ({len(dataset)} images of "
                          f"{config.dataset}): give a smaller --micro-batch")
    return _batches_forever(loader, sampler, ctx.device)


def _batches_forever(loader: DataLoader, sampler: DistributedSampler | None,
                     device: torch.device) -> Iterator[tuple[Tensor, Tensor]]:
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        epoch += 1


def sync_on_last(model: nn.Module, index: int, count: int):
    """DDP's ``no_sync`` for all but the last of ``count`` accumulated micro-batches."""
    if isinstance(model, DistributedDataParallel) and index < count - 1:
        return model.no_sync()
    return contextlib.nullcontext()


class Trainer:
    """Owns G, D, G_ema, their optimizers, the step counter and the run's folder; :meth:`train`
    runs to ``total_steps``, logging, evaluating, sampling and checkpointing on the way.

    The main process opens the run in ``run_dir`` (:func:`~evonorm_core.experiment.rundir.open_run`:
    a folder holding files needs ``resume``, which needs a run of ``gan/train_biggan.py`` there
    with the same non-resumable settings; a second writer is refused). With ``resume`` the run
    continues from ``checkpoints/last.pt`` (deleted because it was damaged: the newest kept snapshot):
    weights, optimizers, EMA, step and the latent stream;
    the data order restarts its epoch, so a resumed run loses no step but is not bit-identical.
    """

    def __init__(self, config: GanConfig, dataset: Dataset, run_dir: str | Path, ctx: DistributedContext | None = None,
                 resume: bool = False) -> None:
        self.config, self.run_dir = config, Path(run_dir)
        self.ctx = ctx or DistributedContext()
        self.accumulation = config.accumulation(self.ctx.world_size)
        self.num_classes = num_classes_of(dataset)
        channels = dataset[0][0].shape[0]
        if channels != config.image_channels:
            raise ConfigError(f"--image-channels {config.image_channels} but the {config.dataset} images have {channels}")
        torch.manual_seed(config.seed)
        self.generator = build_generator(config, self.num_classes).to(self.ctx.device)
        self.discriminator = build_discriminator(config, self.num_classes).to(self.ctx.device)
        self.batches = infinite_batches(dataset, config, self.ctx)
        # after the models and the data: an option that does not fit them (--groups, --micro-batch) leaves no run
        # folder behind
        self.run = open_run(self.run_dir, RUN_KIND, config, resume=resume) if self.ctx.is_main else None
        self.ema = EMA(self.generator, config.ema_decay, config.ema_start)
        self.opt_g = self._adam(self.generator, config.g_lr)
        self.opt_d = self._adam(self.discriminator, config.d_lr)
        self.g_train, self.d_train = self._wrap(self.generator), self._wrap(self.discriminator)
        self.dataset = dataset
        self.step = 0
        self.latent_rng = torch.Generator()
        self._seed_latents()
        last = resume_point(self.run_dir) if resume else None
        if last is not None:
            self.load_state_dict(self.read_checkpoint(last), last)
            if self.step > config.total_steps:
                raise ConfigError(f"--total-steps {config.total_steps} is below step {self.step}, where the run in "
                                  f"{str(self.run_dir)!r} is: give --total-steps {self.step} or more")
            if self.ctx.is_main:
                print(f"resumed {self.run_dir} at step {self.step}"
                      + ("" if last.name == LAST else f" from its kept snapshot {last.name} (it has no {LAST})"),
                      flush=True)
        elif resume and self.ctx.is_main:  # stopped before its first checkpoint, or a clone without checkpoints
            print(f"{self.run_dir} holds no checkpoints/{LAST} to resume from: training from step 0", flush=True)
        self.saved_step = self.step  # the step of the newest checkpoint (or where training starts)

    def _seed_latents(self) -> None:
        """Seed the latent RNG from (seed, rank, step): distinct per process, reproducible on resume."""
        self.latent_rng.manual_seed(self.config.seed * 1_000_003 + self.ctx.rank * 10_007 + self.step)

    def _adam(self, model: nn.Module, lr: float) -> torch.optim.Adam:
        return torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(self.config.betas), eps=self.config.adam_eps)

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
        """One D update on ``batch_size`` real and as many generated images (hinge loss)."""
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
        """One G update through the frozen D (hinge loss)."""
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
            "config": config_to_dict(self.config),
            "num_classes": self.num_classes,
            "step": self.step,
            "G": self.generator.state_dict(),
            "D": self.discriminator.state_dict(),
            "G_ema": self.ema.model.state_dict(),
            "opt_g": self.opt_g.state_dict(),
            "opt_d": self.opt_d.state_dict(),
        }

    def read_checkpoint(self, path: Path) -> dict:
        state = load_checkpoint(path, map_location=self.ctx.device)
        require_keys(state, ("config", "step", "G", "D", "G_ema", "opt_g", "opt_d"), path)
        return state

    def load_state_dict(self, state: dict, path: Path | None = None) -> None:
        try:
            self.generator.load_state_dict(state["G"])
            self.discriminator.load_state_dict(state["D"])
            self.ema.model.load_state_dict(state["G_ema"])
            self.opt_g.load_state_dict(state["opt_g"])
            self.opt_d.load_state_dict(state["opt_d"])
        except (RuntimeError, ValueError, KeyError) as error:
            where = path or checkpoint_dir(self.run_dir) / LAST
            raise ConfigError(f"checkpoint {str(where)!r} does not fit this run ({str(error).splitlines()[0]}): "
                              "it was written with another layer, width or resolution") from None
        self.step = int(state["step"])
        self._seed_latents()

    def keeps(self, step: int) -> bool:
        """Whether ``step`` gets a kept snapshot ``step_N.pt`` (every ``keep_every`` steps)."""
        return bool(self.config.keep_every) and step % self.config.keep_every == 0

    def save(self) -> None:
        """Write ``checkpoints/last.pt`` (and the step's kept snapshot, if it has one) from the main process."""
        self.saved_step = self.step
        if not self.ctx.is_main:
            return
        state = self.state_dict()
        save_checkpoint(checkpoint_dir(self.run_dir) / LAST, state)
        if self.keeps(self.step):
            save_checkpoint(checkpoint_dir(self.run_dir) / f"step_{self.step:07d}.pt", state)

    def train(self) -> dict[str, float]:
        """Train to ``total_steps``; returns the last logged scalars (with IS/FID where measured).

        A stop signal (SIGINT, SIGTERM) ends the step it arrives in, then ``last.pt`` is written at that
        step before the stop goes on, so a resumed run repeats no step."""
        config, main = self.config, self.ctx.is_main
        writer = self._writer() if main else None
        grid = grid_latents(config.dim_z, self.num_classes)
        progress = Progress(config.total_steps, "steps", prefix=f"{self.run_dir}", interval=0.0,
                            initial=self.step, enabled=main)
        self._truncate_log()
        scalars: dict[str, float] = {}
        try:
            while self.step < config.total_steps:
                with stop_signals_after_block():
                    scalars = self.train_step()
                last = self.step == config.total_steps
                if main and config.eval_every and (self.step % config.eval_every == 0 or last):
                    scalars.update(self.evaluate(config.eval_samples))
                if main and (self.step % config.log_every == 0 or last):
                    self._log(writer, scalars, progress)
                if main and (self.step % config.sample_every == 0 or last):
                    path = self.run_dir / "samples" / f"step_{self.step:07d}.png"
                    writer.add_image("samples/G_ema", save_sample_grid(self.sampling_generator(), str(path), *grid),
                                     self.step)
                if self.step % config.save_every == 0 or self.keeps(self.step) or last:
                    self.save()
        except KeyboardInterrupt:  # a stop signal, at a step boundary: keep the steps since the last checkpoint
            if self.step != self.saved_step:
                self.save()
            raise
        finally:
            if writer is not None:
                writer.close()
                plot_curves(self.run_dir)
            if self.run is not None:
                self.run.close()
        return scalars

    def sampling_generator(self) -> nn.Module:
        """A copy of G_ema with BigGAN's standing statistics (a no-op for batch-independent layers),
        computed in this process only (the copy's layers do not synchronize: only rank 0 samples)."""
        generator = copy.deepcopy(self.ema.model)
        for module in generator.modules():
            if getattr(module, "sync", False):
                module.sync = False
        standing_statistics(generator, num_batches=8, batch_size=min(self.config.micro_batch, 64), seed=self.step)
        return generator.eval()

    def evaluate(self, num_samples: int) -> dict[str, float]:
        """Digits-classifier (or Inception, when the data are not the digits: skipped) IS/FID of G_ema."""
        if self.config.dataset != "digits":
            return {}
        # imported here: torch-fidelity and torchvision take about 2 s to import, and only digits runs evaluate
        from evonorm_suite.gan.metrics import digits_fidelity

        return digits_fidelity(self.sampling_generator(), self.config.resolution, num_samples, seed=self.step)

    def _writer(self):
        return SummaryWriter(str(self.run_dir / "tb"))

    def _truncate_log(self) -> None:
        """Drop log lines written after the checkpoint this run continues from."""
        log = self.run_dir / LOG_FILE
        if self.ctx.is_main and log.exists():
            kept = [r for r in read_log(log) if r["step"] <= self.step]
            atomic_write_text(log, "".join(json.dumps(r) + "\n" for r in kept))

    def _log(self, writer, scalars: dict[str, float], progress: Progress) -> None:
        done = self.step - progress.done
        for key, value in scalars.items():
            writer.add_scalar(f"train/{key}" if key in ("loss_d", "loss_g", "d_real", "d_fake") else f"eval/{key}",
                              value, self.step)
        append_jsonl(self.run_dir / LOG_FILE, {"step": self.step, **scalars})
        progress.update(done, **{k: v for k, v in scalars.items()})


def read_log(path: Path) -> list[dict]:
    """The records of a run's ``log.jsonl``; :class:`CorruptFileError` naming the line of one that is not an
    object with an integer ``step``."""
    records = read_jsonl(path, what="training log")
    for line, record in enumerate(records, 1):
        if not isinstance(record, dict) or type(record.get("step")) is not int:
            raise CorruptFileError(f"training log {str(path)!r}, line {line}: not a record with an integer step; "
                                   "delete that line and what follows it (resuming writes them again)")
    return records


def plot_curves(run_dir: Path) -> Path | None:
    """``RUN/curves.png``: losses and (where measured) IS/FID against steps, from ``log.jsonl``."""
    log = run_dir / LOG_FILE
    if not log.exists():
        return None
    records = read_log(log)
    panels = {}
    for title, keys in (("losses", ("loss_d", "loss_g")), ("D logits", ("d_real", "d_fake")),
                        ("digits-classifier FID", ("fid",)), ("digits-classifier IS", ("is_mean",)),
                        ("samples of the requested class", ("class_accuracy",))):
        curves = []
        for key in keys:
            points = [(r["step"], r[key]) for r in records if key in r]
            if points:
                curves.append(Series(key, [p[0] for p in points], [p[1] for p in points]))
        panels[title] = curves
    return plot_series(run_dir / "curves.png", panels, xlabel="step", ylabel="value")
