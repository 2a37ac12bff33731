"""The proxy task (paper section 4.2, Appendix B/C): train a candidate layer in the K
anchor architectures and score it by validation accuracy, rejecting early.

For each candidate, :class:`ProxyEvaluator` runs, cheapest first (the static checks ran
before, in the driver):

1. quality: train each anchor ``quality_steps`` steps (paper: 100); reject when the
   validation accuracy is below ``quality_threshold`` (paper: 20%) on any anchor;
2. stability: adversarial ascent of the conv weights on the gradient norm (paper: 100
   steps, reject above 1e8), on the first ``stability_anchors`` anchors;
3. fitness: continue training to ``train_steps`` (paper: 2000 constant-LR for the B
   search, 5000 cosine for the S search); the K accuracies are the candidate's fitness.

Training: random ``crop_size`` crops of the training images, SGD with Nesterov momentum
0.9, weight decay 1e-4; validation on the full images, batch aggregations reading their
moving averages (optionally recomputed first over ``recalibration_batches`` batches). Every candidate is trained from
the same seed, so equal layers get equal scores.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from classification.anchors import ANCHOR_NAMES, build_anchor
from classification.data import load_cifar10, load_digits_proxy
from evonorm_core.search.genome import Genome
from evonorm_core.search.layer import GraphLayer, genome_norm_act
from evonorm_core.search.rejection import worst_case_gradient_norm

DATASETS = ("digits", "cifar10")
SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class ProxyConfig:
    """How candidates are trained and rejected; defaults are the paper's (B search)."""

    anchors: tuple[str, ...] = ANCHOR_NAMES
    anchor_depth: float = 1.0
    data: str = "digits"
    data_dir: str | None = None
    image_size: int = 32
    crop_size: int = 24
    batch_size: int = 128
    eval_batch_size: int = 512
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    train_steps: int = 2000
    schedule: str = "constant"
    quality_steps: int = 100
    quality_threshold: float = 0.2
    stability_steps: int = 100
    stability_threshold: float = 1e8
    stability_lr: float = 0.01
    stability_batch_size: int = 32
    stability_anchors: int | None = None
    recalibration_batches: int = 0
    holdout: bool = False
    seed: int = 0
    threads: int = 1
    layer_options: dict = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        unknown = [a for a in self.anchors if a not in ANCHOR_NAMES]
        if unknown or not self.anchors:
            raise ValueError(f"unknown anchors {unknown or '(none given)'}; accepted: {list(ANCHOR_NAMES)}")
        if self.data not in DATASETS:
            raise ValueError(f"unknown data {self.data!r}; accepted: {list(DATASETS)}")
        if self.data == "cifar10" and not self.data_dir:
            raise ValueError("data 'cifar10' needs a data_dir (the folder holding cifar-10-batches-py)")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; accepted: {list(SCHEDULES)}")
        if not 0 < self.crop_size <= self.image_size:
            raise ValueError(f"crop_size must be in (0, image_size={self.image_size}], got {self.crop_size}")
        if not 0 <= self.quality_steps <= self.train_steps:
            raise ValueError(f"quality_steps must be in [0, train_steps={self.train_steps}], got {self.quality_steps}")


HOLDOUT_FRACTION = 0.1


@lru_cache(maxsize=2)
def load_data(data: str, data_dir: str | None, image_size: int, holdout: bool = False) -> tuple[Tensor, ...]:
    """``(train_x, train_y, val_x, val_y)`` at ``image_size``, loaded once per process.

    With ``holdout`` (reranking, paper section 5.2) the validation set is not used: the
    training set is split 90% / 10% (fixed seed) and the 10% is returned in its place.
    """
    if data == "digits":
        train_x, train_y, val_x, val_y = load_digits_proxy(image_size)
    else:
        train_x, train_y, val_x, val_y = load_cifar10(data_dir)
        if image_size != train_x.shape[-1]:
            train_x, val_x = (F.interpolate(t, size=image_size, mode="bilinear", align_corners=False) for t in (train_x, val_x))
    if not holdout:
        return train_x, train_y, val_x, val_y
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(0))
    cut = int(round(len(order) * HOLDOUT_FRACTION))
    return train_x[order[cut:]], train_y[order[cut:]], train_x[order[:cut]], train_y[order[:cut]]


def random_crops(images: Tensor, size: int, generator: torch.Generator) -> Tensor:
    """One random ``size`` x ``size`` crop of each image."""
    limit = images.shape[-1] - size + 1
    offsets = torch.randint(0, limit, (len(images), 2), generator=generator).tolist()
    return torch.stack([img[:, i:i + size, j:j + size] for img, (i, j) in zip(images, offsets)])


class _Trainer:
    """One anchor being trained on the proxy task, resumable step by step."""

    def __init__(self, model: nn.Module, config: ProxyConfig, data: tuple[Tensor, ...]) -> None:
        self.model, self.config, self.data = model, config, data
        self.optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                         nesterov=config.momentum > 0, weight_decay=config.weight_decay)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.step = 0

    def learning_rate(self) -> float:
        if self.config.schedule == "constant":
            return self.config.lr
        return 0.5 * self.config.lr * (1 + math.cos(math.pi * self.step / self.config.train_steps))

    def train_to(self, steps: int) -> bool:
        """Train until ``steps`` steps are done; False if the loss became non-finite."""
        train_x, train_y = self.data[:2]
        self.model.train()
        while self.step < steps:
            idx = torch.randint(0, len(train_x), (self.config.batch_size,), generator=self.generator)
            inputs = random_crops(train_x[idx], self.config.crop_size, self.generator)
            loss = F.cross_entropy(self.model(inputs), train_y[idx])
            if not torch.isfinite(loss):
                return False
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.step += 1
        return True

    @torch.no_grad()
    def recalibrate(self) -> None:
        """Recompute the moving averages of the batch aggregations as the plain average over
        ``recalibration_batches`` training batches with the current weights (after very
        short training, averages that lag the fast-moving weights put eval accuracy at chance)."""
        layers = [m for m in self.model.modules() if isinstance(m, GraphLayer) and m.uses_batch_statistics]
        if not layers or not self.config.recalibration_batches:
            return
        momenta = [m.momentum for m in layers]
        for layer in layers:
            layer.reset_running_stats()
            layer.momentum = None
        self.model.train()
        for _ in range(self.config.recalibration_batches):
            idx = torch.randint(0, len(self.data[0]), (self.config.batch_size,), generator=self.generator)
            self.model(self.data[0][idx])
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum

    @torch.no_grad()
    def accuracy(self) -> float:
        val_x, val_y = self.data[2:]
        self.recalibrate()
        self.model.eval()
        correct = sum(
            (self.model(val_x[i:i + self.config.eval_batch_size]).argmax(1) == val_y[i:i + self.config.eval_batch_size]).sum().item()
            for i in range(0, len(val_x), self.config.eval_batch_size)
        )
        return correct / len(val_x)


def _result(status: str, stage: str | None = None, reason: str = "", accuracies: dict | None = None) -> dict:
    return {"status": status, "stage": stage, "reason": reason, "accuracies": accuracies or {}}


class ProxyEvaluator:
    """``evaluator(genome_dict) -> result``: the quality, stability and fitness stages.

    Picklable (only the config travels); data are loaded once per process. The result has
    ``status`` ("accepted"/"rejected"), ``stage``, ``reason``, ``accuracies`` (anchor ->
    validation accuracy: after ``train_steps`` if accepted, after ``quality_steps``
    otherwise) and ``timings`` (seconds per stage).
    """

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config

    def build(self, anchor: str, genome: Genome) -> nn.Module:
        torch.manual_seed(self.config.seed)
        return build_anchor(
            anchor, genome_norm_act(genome, **self.config.layer_options), depth_multiplier=self.config.anchor_depth
        )

    def __call__(self, genome_dict: dict) -> dict:
        torch.set_num_threads(self.config.threads)
        genome = Genome.from_dict(genome_dict)
        data = load_data(self.config.data, self.config.data_dir, self.config.image_size, self.config.holdout)
        timings: dict[str, float] = {}
        result = self._evaluate(genome, data, timings)
        result["timings"] = {k: round(v, 3) for k, v in timings.items()}
        return result

    def _evaluate(self, genome: Genome, data: tuple[Tensor, ...], timings: dict[str, float]) -> dict:
        cfg = self.config
        start = time.monotonic()
        trainers, accuracies = [], {}
        for anchor in cfg.anchors:
            trainer = _Trainer(self.build(anchor, genome), cfg, data)
            if not trainer.train_to(cfg.quality_steps):
                timings["quality"] = time.monotonic() - start
                return _result("rejected", "quality", f"non-finite loss on {anchor} within {cfg.quality_steps} steps", accuracies)
            accuracies[anchor] = trainer.accuracy()
            trainers.append(trainer)
            if accuracies[anchor] < cfg.quality_threshold:
                timings["quality"] = time.monotonic() - start
                return _result("rejected", "quality", f"accuracy {accuracies[anchor]:.3f} < {cfg.quality_threshold} on "
                               f"{anchor} after {cfg.quality_steps} steps", accuracies)
        timings["quality"] = time.monotonic() - start

        start = time.monotonic()
        reason = self._stability_failure(genome, data)
        timings["stability"] = time.monotonic() - start
        if reason is not None:
            return _result("rejected", "stability", reason, accuracies)

        start = time.monotonic()
        for anchor, trainer in zip(cfg.anchors, trainers):
            if not trainer.train_to(cfg.train_steps):
                timings["fitness"] = time.monotonic() - start
                return _result("rejected", "fitness", f"non-finite loss on {anchor} within {cfg.train_steps} steps", accuracies)
            accuracies[anchor] = trainer.accuracy()
        timings["fitness"] = time.monotonic() - start
        return _result("accepted", accuracies=accuracies)

    def _stability_failure(self, genome: Genome, data: tuple[Tensor, ...]) -> str | None:
        cfg = self.config
        if cfg.stability_steps == 0:
            return None
        generator = torch.Generator().manual_seed(cfg.seed + 1)
        idx = torch.randint(0, len(data[0]), (cfg.stability_batch_size,), generator=generator)
        inputs, targets = random_crops(data[0][idx], cfg.crop_size, generator), data[1][idx]
        for anchor in cfg.anchors[:cfg.stability_anchors]:
            model = self.build(anchor, genome).train()
            worst, steps = worst_case_gradient_norm(
                model, lambda m: F.cross_entropy(m(inputs), targets),
                cfg.stability_steps, cfg.stability_lr, cfg.stability_threshold,
            )
            if worst > cfg.stability_threshold:
                return f"gradient norm {worst:.3g} > {cfg.stability_threshold:.3g} on {anchor} after {steps} ascent steps"
        return None

