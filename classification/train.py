"""Train a classifier with any norm-act layer: ImageNet, CIFAR-10, or the embedded digits or MNIST.

    python classification/train.py                                  # digits demo, CPU
    python classification/train.py --model resnet50 --norm-act evonorm_b0 \\
        --data imagenet --data-dir /data/imagenet --output-dir runs/r50_b0
    torchrun --nproc_per_node 8 classification/train.py --model resnet50 --table table11 ...   # DDP

Without ``--data`` the model trains on scikit-learn's digits (real, embedded, tiny) and
says so; ``--data mnist`` takes the embedded 5,000 MNIST digits (28 px), hard enough that
normalization layers differ. ``--workers W`` simulates W data-parallel workers in this process
(ghost batches: batch statistics over each worker's ``--batch-size`` images, one gradient over
all W x ``--batch-size``), as the paper's Table 3 runs its workers. ``--table`` takes a paper
table's whole training setup (e.g. Table 11's 180 epochs with RandAugment and stages at
60/120/160); the recipe flags override single fields. The output folder belongs to the run:
``config.json`` (the resolved settings), ``checkpoint.pt`` every epoch and where ``--max-steps``
or a stop signal stops (a resume continues inside that epoch), ``result.json`` (with
the last fifth's flatness of the validation curve) and TensorBoard scalars in ``tb/``.
``--resume`` continues the run in the folder with its own settings (flags given with it
may change only how long it trains and how it reports); without it a folder that holds
files is refused. A non-finite loss stops the run with one line naming the step and what to
try, recorded in ``diverged.json`` (exit status 3); SIGINT and SIGTERM end the step in progress,
save the checkpoint there and stop with one line (exit status 130 or 143); ``--resume`` continues
from that step.
Installed as the ``evonorm-train`` command.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from evonorm_core import list_norm_acts, norm_act_factory, norm_act_options, resolve_name
from evonorm_core.classifiers.anchors import ANCHOR_NAMES, ANCHORS, build_anchor
from evonorm_core.classifiers.data import (
    MNIST_DATASETS,
    Split,
    TensorImages,
    load_cifar10,
    load_digits_proxy,
    load_mnist_proxy,
)
from evonorm_core.classifiers.models import MODEL_NAMES, MODEL_RESOLUTIONS, build_model
from evonorm_core.classifiers.proxy_task import PROXY_TRAINING
from evonorm_core.classifiers.schedule import SCHEDULES
from evonorm_core.classifiers.trainer import Trainer, centre_crops
from evonorm_core.experiment.arguments import MAX_SEED
from evonorm_core.experiment.config import (
    ConfigError,
    add_config_arguments,
    config_to_dict,
    explicit_values,
    option,
    replace_config,
    validate,
)
from evonorm_core.experiment.convergence import last_fifth_flatness
from evonorm_core.experiment.distributed import DistributedContext, shutdown
from evonorm_core.experiment.files import (
    CorruptFileError,
    atomic_write_json,
    load_checkpoint,
    read_json_object,
    save_checkpoint,
)
from evonorm_core.experiment.progress import Progress
from evonorm_core.experiment.rundir import RunDirError, RunKind, open_run, resumed_config
from evonorm_core.experiment.seeding import deterministic_algorithms, seed_everything
from evonorm_core.experiment.stopping import StopCleanly, stop_signals_after_block
from evonorm_suite.classification.imagenet import load_imagenet
from evonorm_suite.classification.paper_tables import TABLES, table_recipe
from evonorm_suite.classification.recipes import PROXY_RECIPE, Recipe, recipe_for

DATASETS = ("digits", *MNIST_DATASETS, "cifar10", "imagenet")
VALIDATION_FRAMINGS = ("full", "centre")
MNIST_SIZE = 28
CHECKPOINT_FILE, RESULT_FILE = "checkpoint.pt", "result.json"
RESULT_CONFIG_KEYS = ("model", "norm_act", "seed")  # what a grid's report looks up in a run's config
RUN_KIND = RunKind("classification/train.py")
COMMAND = "python classification/train.py"
DIVERGENCE_ADVICE = ("a lower learning rate (--base-lr), a longer warmup (--warmup-epochs) or another --seed (a layer "
                     "that diverges at every setting is a result of its own)")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on; saved as ``config.json`` beside its outputs."""

    model: str = option("resnet50_cifar", "ImageNet model or CIFAR anchor", choices=MODEL_NAMES + ANCHOR_NAMES)
    norm_act: str = option("bn_relu", f"norm-act layer, one of: {', '.join(list_norm_acts())}")
    width_multiplier: float = option(1.0, "extra channel multiplier (Fig. 11: 0.9/1.0/1.1 for mobilenetv2)",
                                     min=0, min_open=True)
    anchor_depth: float = option(1.0, "anchors only: blocks per stage scaled by this, rounded up (0.01: one block)",
                                 min=0, max=1, min_open=True)
    groups: int | None = option(None, "groups of grouped layers (none: 32, lowered until it divides)", min=1)
    sync_batch_stats: bool = option(False, "all-reduce batch statistics across DDP workers (BN, B series)")
    data: str = option("digits", "dataset: digits (sklearn, 8x8 upsampled), mnist (the embedded 5,000 MNIST digits, "
                       "28 px), mnist-rot, mnist-back-rand, mnist-rot-back-rand (those digits rotated, on noise, "
                       "both: Larochelle et al. 2007's variations), cifar10 or imagenet (these two need --data-dir)",
                       choices=DATASETS)
    data_dir: str | None = option(None, "ImageNet folder (train/, val/) or CIFAR-10's parent folder", resumable=True)
    holdout_fraction: float = option(0.0, "evaluate on this seeded fraction of ImageNet-train (reranking: 0.1)",
                                     min=0, max=1, max_open=True)
    train_subset: int | None = option(None, "train on the first N training images only (quick checks)", min=1)
    image_size: int | None = option(None, "image resolution (none: 28 for mnist; 32 for anchors, digits and cifar10; "
                                    "the model's on imagenet)", min=8)
    crop_size: int | None = option(None, "in-memory data: train on random crops of this size (none: the whole images; "
                                   "cifar10 at 32 px: the proxy task's 24)", min=8)
    validation: str = option("full", "in-memory data: what is validated: full, the whole images; centre, their "
                             "centre crop of the training crops' size (MNIST's digits sit in a black frame: crops "
                             "change per-sample statistics, so per-sample layers need the crops' framing)",
                             choices=VALIDATION_FRAMINGS)
    table: str | None = option(None, "take the whole training setup of this paper table", choices=tuple(TABLES))
    batch_size: int | None = option(None, "images per worker (none: the recipe's)", min=1)
    workers: int = option(1, "simulated data-parallel workers in this process (ghost batches): a step trains on "
                          "--batch-size x this many images, batch statistics are each worker's own; under torchrun "
                          "every process is a worker: 1", min=1)
    epochs: float | None = option(None, "training epochs (none: the recipe's)", min=0, min_open=True)
    max_steps: int | None = option(None, "stop after this many steps (the schedule still spans --epochs)", min=1,
                                   resumable=True)
    base_lr: float | None = option(None, "LR per 256 images, scaled linearly with the total batch (none: the recipe's)",
                                   min=0, min_open=True)
    schedule: str | None = option(None, "LR schedule (none: the recipe's)", choices=SCHEDULES)
    warmup_epochs: float | None = option(None, "linear warmup length (none: the recipe's)", min=0)
    randaugment: bool | None = option(None, "ImageNet: RandAugment, 2 ops of magnitude 9 (none: the recipe's; on in "
                                      "the recipes of Tables 3 and 10-12)")
    seed: int = option(0, "seed of initialization, data order and augmentation", min=0, max=MAX_SEED)
    deterministic: bool = option(False, "deterministic algorithms only (torch.use_deterministic_algorithms): a CUDA "
                                 "run then repeats bit for bit, a little slower (a CPU run repeats without it)",
                                 resumable=True)
    output_dir: str = option("runs/classification", "the run's folder: config, checkpoint, result, TensorBoard",
                             resumable=True)
    resume: bool = option(False, "continue the run in --output-dir with its saved settings; of the other flags only "
                          "those that 'may change on --resume' may be given with it", resumable=True)
    num_workers: int = option(4, "data loader processes for ImageNet", min=0, resumable=True)
    log_every: int = option(10, "steps between TensorBoard training scalars (progress lines: every 10 s)", min=1,
                            resumable=True)
    progress: bool = option(True, "print progress lines", resumable=True)

    def __post_init__(self) -> None:
        validate(self)
        try:
            resolve_name(self.norm_act)
        except ValueError as error:
            raise ConfigError(f"--norm-act: {error}") from None
        if self.data != "imagenet" and (self.holdout_fraction or self.randaugment):
            raise ConfigError(f"--holdout-fraction and --randaugment are ImageNet's (--data imagenet); --data "
                              f"{self.data} has its own validation split and augmentation")
        if self.data in ("cifar10", "imagenet") and not self.data_dir:
            raise ConfigError(f"--data {self.data} needs --data-dir (nothing is downloaded)")
        if self.model in ANCHORS and self.width_multiplier != 1.0:
            raise ConfigError("--width-multiplier is fixed by the paper for anchors; use the ImageNet model name")
        if self.model not in ANCHORS and self.anchor_depth != 1.0:
            raise ConfigError(f"--anchor-depth applies to the CIFAR anchors ({', '.join(ANCHOR_NAMES)}), not {self.model}")
        if self.table is not None and self.model not in TABLES[self.table].models:
            raise ConfigError(f"--table {self.table} has no {self.model!r} column; it has {', '.join(TABLES[self.table].models)}")
        self._check_framing()

    def _check_framing(self) -> None:
        """Crops and validation framing: for in-memory data, within the image, centre only with crops."""
        if self.data == "imagenet" and (self.crop_size is not None or self.validation != "full"):
            raise ConfigError("--crop-size and --validation are for in-memory data (digits, mnist, cifar10); "
                              "ImageNet has its own transforms")
        if self.crop_size is not None and self.crop_size > self.resolution:
            raise ConfigError(f"--crop-size {self.crop_size} is larger than the {self.resolution} px images; "
                              f"accepted: 8..{self.resolution}")
        if self.validation == "centre" and self.training_crop is None:
            raise ConfigError("--validation centre validates the centre crop of the training crops' size: "
                              "give --crop-size (or use --validation full)")

    @property
    def resolution(self) -> int:
        """The images' size: ``image_size``, else 28 for MNIST, 32 for anchors and small data, the model's on ImageNet."""
        if self.image_size is not None:
            return self.image_size
        if self.data in MNIST_DATASETS:
            return MNIST_SIZE
        at_proxy_size = self.model in ANCHORS or self.data != "imagenet"
        return PROXY_TRAINING.image_size if at_proxy_size else MODEL_RESOLUTIONS[self.model]

    @property
    def training_crop(self) -> int | None:
        """The random training crops' size: ``crop_size``, else the proxy task's 24 for CIFAR-10 at 32 px; None:
        whole images."""
        if self.crop_size is not None:
            return self.crop_size
        at_proxy_size = self.data == "cifar10" and self.resolution == PROXY_TRAINING.image_size
        return PROXY_TRAINING.crop_size if at_proxy_size else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python classification/train.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_config_arguments(parser, TrainConfig, TrainConfig())
    return parser


def config_from_argv(argv: list[str] | None = None) -> TrainConfig:
    """The run's configuration: defaults + flags, or with ``--resume`` the saved one + the allowed flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given = explicit_values(args, TrainConfig)
    try:
        if given.get("resume"):
            return resumed_config(given.get("output_dir", TrainConfig.output_dir), RUN_KIND, TrainConfig, given)
        config = replace_config(TrainConfig(), given)
    except (ValueError, RunDirError) as error:  # ConfigError, CorruptFileError
        parser.error(str(error))
    if "data" not in given and os.environ.get("RANK", "0") == "0":
        print("no --data given: training on the embedded digits (scikit-learn load_digits, 1,797 images)")
    return config


def resolve_recipe(config: TrainConfig) -> Recipe:
    """The whole recipe of the run: the paper table's, the paper's for the model and layer, or the
    proxy task's (anchors); then the recipe flags given."""
    if config.model in ANCHORS:
        base = PROXY_RECIPE
    elif config.table is not None:
        base = table_recipe(config.table, config.model)
    else:
        base = recipe_for(config.model, config.norm_act)
    overrides = {"base_lr": config.base_lr, "schedule": config.schedule, "epochs": config.epochs,
                 "warmup_epochs": config.warmup_epochs, "batch_per_worker": config.batch_size,
                 "randaugment": config.randaugment}
    return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})


def build_datasets(config: TrainConfig, recipe: Recipe) -> tuple[Dataset, Dataset, int]:
    """``(train, val, num_classes)`` for ``config.data``: in-memory sets with the training crops and the
    validation framing of ``config``, flipped only for CIFAR-10 (a mirrored digit is another shape)."""
    if config.data == "imagenet":
        train, val = load_imagenet(config.data_dir, config.resolution, recipe.randaugment, config.holdout_fraction,
                                   config.seed)
        return train, val, 1000
    train_x, train_y, val_x, val_y = load_in_memory(config)
    crop = config.training_crop
    if config.validation == "centre":
        val_x = centre_crops(val_x, crop)
    train = TensorImages(train_x, train_y, crop=crop, flip=config.data == "cifar10")
    return train, TensorImages(val_x, val_y), 10


def load_in_memory(config: TrainConfig) -> Split:
    """The normalized CIFAR-10, MNIST (or one of its variations) or digits split of ``config``."""
    if config.data == "cifar10":
        return load_cifar10(config.data_dir)
    if config.data in MNIST_DATASETS:
        return load_mnist_proxy(config.resolution, config.data)
    return load_digits_proxy(config.resolution)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, env: DistributedContext) -> dict[str, float]:
    """Top-1 accuracy (%) and mean loss over this process's shard, summed over processes."""
    model.eval()
    correct = loss = count = 0.0
    for images, labels in loader:
        images, labels = images.to(env.device, non_blocking=True), labels.to(env.device, non_blocking=True)
        logits = model(images)
        loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        count += labels.numel()
    model.train()
    correct, loss, count = env.all_sum([correct, loss, count])
    return {"top1": 100.0 * correct / max(count, 1), "loss": loss / max(count, 1)}


class EpochSampler(DistributedSampler):
    """:class:`DistributedSampler` whose epoch may start after its first ``skip`` indices: a run resumed inside
    an epoch trains the rest of that epoch's order without loading (and augmenting) the batches trained before."""

    skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return super().__len__() - self.skip


@dataclass
class TrainingSetup:
    """What :func:`train` works with, built from a :class:`TrainConfig`."""

    model: nn.Module
    recipe: Recipe
    sampler: DistributedSampler
    train_loader: DataLoader
    val_loader: DataLoader
    trainer: Trainer


def build(config: TrainConfig, env: DistributedContext) -> TrainingSetup:
    """Model, recipe, data loaders and trainer for ``config``."""
    make = norm_act_factory(config.norm_act, **norm_act_options(groups=config.groups, sync=config.sync_batch_stats))
    recipe = resolve_recipe(config)
    if config.workers > 1 and env.distributed:
        raise ConfigError(f"--workers {config.workers} simulates workers in one process; under torchrun every "
                          "process is a worker: use --workers 1")
    train_set, val_set, num_classes = build_datasets(config, recipe)
    if config.train_subset is not None:
        if config.train_subset > len(train_set):
            raise ConfigError(f"--train-subset must be in 1..{len(train_set)}, got {config.train_subset}")
        train_set = Subset(train_set, range(config.train_subset))
    try:
        if config.model in ANCHORS:
            model = build_anchor(config.model, make, num_classes, depth_multiplier=config.anchor_depth)
        else:
            model = build_model(config.model, make, num_classes, width_multiplier=config.width_multiplier)
    except ValueError as error:  # e.g. --groups that does not divide a layer's channels
        raise ConfigError(f"--model {config.model} with --norm-act {config.norm_act}"
                          f"{'' if config.groups is None else f' --groups {config.groups}'}: {error}") from None
    model.to(env.device)
    process_batch = recipe.batch_per_worker * config.workers
    total_batch = process_batch * env.world_size
    sampler = EpochSampler(train_set, env.world_size, env.rank, shuffle=True, seed=config.seed, drop_last=True)
    loaders = config.num_workers if config.data == "imagenet" else 0
    # the loader's own generator: starting an epoch's iterator leaves the global RNG (dropout's) as it was
    train_loader = DataLoader(train_set, process_batch, sampler=sampler, drop_last=True, generator=torch.Generator(),
                              num_workers=loaders, pin_memory=env.device.type == "cuda", persistent_workers=loaders > 0)
    if len(train_loader) == 0:
        raise ConfigError(f"batch size {recipe.batch_per_worker} x {config.workers * env.world_size} workers exceeds "
                          f"the {len(train_set)} training images")
    val_shard = Subset(val_set, range(env.rank, len(val_set), env.world_size))
    val_loader = DataLoader(val_shard, max(process_batch, 256), num_workers=loaders)
    module = nn.parallel.DistributedDataParallel(model) if env.distributed else model
    trainer = Trainer(model, recipe.optimizer_settings(total_batch), recipe.schedule_in_steps(len(train_loader)),
                      recipe.label_smoothing, module=module, workers=config.workers)
    return TrainingSetup(model, recipe, sampler, train_loader, val_loader, trainer)


def describe_data(config: TrainConfig, setup: TrainingSetup) -> str:
    """One line on what the run trains on and how many steps an epoch has."""
    crop = config.training_crop
    framing = f"{config.resolution} px" + (f", {crop} px training crops, validated {config.validation}" if crop else "")
    return (f"data: {config.data} ({len(setup.train_loader.dataset):,} training and {len(setup.val_loader.dataset):,} "
            f"validation images, {framing}); {setup.train_loader.batch_size} images a step, "
            f"{len(setup.train_loader)} steps an epoch")


def restore(path: Path, setup: TrainingSetup, env: DistributedContext) -> tuple[int, int, list]:
    """Load ``checkpoint.pt`` into the setup; ``(epoch, step, history)`` to continue from."""
    # On the CPU: the RNG states must stay CPU byte tensors; load_state_dict moves the rest to the model.
    state = load_checkpoint(path)
    try:
        setup.model.load_state_dict(state["model"])
        setup.trainer.load_state_dict(state["trainer"])
        torch.set_rng_state(state["rng"])
        if env.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], env.device)
        return int(state["epoch"]), int(state["step"]), list(state["history"])
    except (KeyError, RuntimeError, TypeError, ValueError) as error:
        first = str(error).splitlines()[0]
        raise CorruptFileError(f"checkpoint {str(path)!r} does not fit this run ({first}); it was written by another "
                               "model, layer or width: use another --output-dir or delete the checkpoint") from None


def train(config: TrainConfig) -> dict:
    """Run (or resume) one training run; returns the final metrics written to ``result.json``."""
    env = DistributedContext.from_env()
    with deterministic_algorithms(config.deterministic):
        seed_everything(config.seed + env.rank)
        setup = build(config, env)  # before the folder is made: a setting that does not fit leaves nothing behind
        if env.is_main and config.progress:
            print(describe_data(config, setup), flush=True)
        run = open_run(config.output_dir, RUN_KIND, config, resume=config.resume) if env.is_main else None
        try:
            return _train_and_report(config, env, setup)
        finally:
            if run is not None:
                run.close()


def _train_and_report(config: TrainConfig, env: DistributedContext, setup: TrainingSetup) -> dict:
    """Train from scratch or the checkpoint in ``--output-dir``; write and return ``result.json``'s metrics."""
    out = Path(config.output_dir)
    start_epoch, step, history = 0, 0, []
    if config.resume and (out / CHECKPOINT_FILE).exists():
        start_epoch, step, history = restore(out / CHECKPOINT_FILE, setup, env)
        if env.is_main:
            print(f"resumed {out / CHECKPOINT_FILE} at epoch {start_epoch}, step {step}")
    history = _train_epochs(config, setup, env, out, start_epoch, step, history)
    total_batch = setup.recipe.batch_per_worker * config.workers * env.world_size
    result = {"config": config_to_dict(config), "recipe": dataclasses.asdict(setup.recipe),
              "steps": history[-1]["step"] if history else step, "world_size": env.world_size,
              "device": env.device_name,
              "total_batch": total_batch, "peak_lr": setup.recipe.peak_lr(total_batch),
              "history": history, "final_top1": history[-1]["top1"] if history else None,
              "best_top1": max((h["top1"] for h in history), default=None),
              "flatness": last_fifth_flatness([h["top1"] for h in history])}
    if env.is_main:
        atomic_write_json(out / RESULT_FILE, result)
    return result


def _train_epochs(config: TrainConfig, setup: TrainingSetup, env: DistributedContext, out: Path,
                  start_epoch: int, step: int, history: list) -> list:
    trainer = setup.trainer
    writer = _summary_writer(out) if env.is_main else None
    num_epochs = math.ceil(setup.recipe.epochs)
    # a fractional last epoch stops where the LR schedule ends
    scheduled = math.ceil(round(setup.recipe.epochs * len(setup.train_loader), 6))
    total_steps = min(scheduled, config.max_steps or scheduled)
    progress = Progress(total_steps, "steps", prefix=f"{config.model} {config.norm_act}", interval=10.0,
                        initial=step, enabled=env.is_main and config.progress)
    per_epoch = len(setup.train_loader)
    epoch, saved_step = start_epoch, step
    try:
        for epoch in range(start_epoch, num_epochs):
            if step >= total_steps:
                break
            trained = max(step - epoch * per_epoch, 0)  # batches of this epoch trained before a resume mid-epoch
            setup.sampler.set_epoch(epoch, skip=trained * setup.train_loader.batch_size)
            setup.train_loader.generator.manual_seed(config.seed + epoch)  # the loader workers' seeds, as the order's
            for images, labels in setup.train_loader:
                images, labels = images.to(env.device, non_blocking=True), labels.to(env.device, non_blocking=True)
                with stop_signals_after_block():
                    loss = trainer.step(images, labels)
                    step += 1
                if not torch.isfinite(torch.tensor(loss)):
                    raise FloatingPointError(f"loss became {loss} at step {step} ({config.norm_act}, {config.model})")
                if writer and step % config.log_every == 0:
                    writer.add_scalar("train/loss", loss, step)
                    writer.add_scalar("train/lr", trainer.lr, step)
                progress.update(loss=loss, lr=trainer.lr)
                if step >= total_steps:
                    break
            # an epoch cut short by --max-steps is not finished: a resume trains the rest of it
            finished = step >= min(scheduled, (epoch + 1) * per_epoch)
            metrics = evaluate(trainer.module, setup.val_loader, env)
            history.append({"epoch": epoch + 1 if finished else round(step / per_epoch, 3), "step": step, **metrics})
            if writer:
                writer.add_scalar("val/top1", metrics["top1"], step)
                writer.add_scalar("val/loss", metrics["loss"], step)
            if env.is_main:
                _save(out / CHECKPOINT_FILE, config, setup, env, epoch + 1 if finished else epoch, step, history)
            saved_step = step
    except KeyboardInterrupt:  # a stop signal, between steps: keep the steps since the last checkpoint
        if env.is_main and step != saved_step:  # the epoch in progress; a resume evaluates it when it ends
            evaluated = [entry for entry in history if entry["step"] < step]
            _save(out / CHECKPOINT_FILE, config, setup, env, epoch, step, evaluated)
        raise
    finally:
        if writer:
            writer.close()
    return history


def _save(path: Path, config: TrainConfig, setup: TrainingSetup, env: DistributedContext, epoch: int, step: int,
          history: list) -> None:
    """The checkpoint a resume continues from: ``epoch`` is the first not finished, ``step`` the steps trained."""
    rng = {"rng": torch.get_rng_state()}
    if env.device.type == "cuda":
        rng["cuda_rng"] = torch.cuda.get_rng_state(env.device)
    save_checkpoint(path, {"model": setup.model.state_dict(), "trainer": setup.trainer.state_dict(), "epoch": epoch,
                           "step": step, "history": history, **rng, "config": config_to_dict(config)})


def read_result(path: Path, advice: str, config_keys: tuple[str, ...] = RESULT_CONFIG_KEYS) -> dict:
    """A ``result.json`` of this trainer; :class:`CorruptFileError` naming it, then ``advice``, if it is not one
    (no ``final_top1``, no ``config`` object with ``config_keys``, or a ``history`` entry without ``top1``)."""
    fix = f"it is not a result.json of classification/train.py; {advice}"
    result = read_json_object(path, what="run result", keys=("config", "final_top1"), advice=fix)
    config, history = result["config"], result.get("history", [])
    if not isinstance(config, dict) or not set(config_keys) <= config.keys():
        raise CorruptFileError(f"run result {str(path)!r}: its config is not an object with {', '.join(config_keys)}: "
                               f"{fix}")
    if not isinstance(history, list) or not all(isinstance(entry, dict) and "top1" in entry for entry in history):
        raise CorruptFileError(f"run result {str(path)!r}: its history is not a list of evaluations with top1: {fix}")
    return result


def _summary_writer(out: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tb"))


def main(argv: list[str] | None = None) -> int:
    config = config_from_argv(argv)
    started = time.monotonic()
    try:
        with StopCleanly(COMMAND, DIVERGENCE_ADVICE, f"{COMMAND} --resume --output-dir {config.output_dir}",
                         config.output_dir):
            result = train(config)
    except (ConfigError, RunDirError, CorruptFileError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from None
    finally:
        shutdown()
    if os.environ.get("RANK", "0") == "0" and result["final_top1"] is not None:
        print(f"final top-1 {result['final_top1']:.2f}% after {result['steps']} steps "
              f"({time.monotonic() - started:.0f} s) -> {Path(config.output_dir) / RESULT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
