"""The paper's ImageNet training recipes (section 5.1, Appendix C) and their LR schedules.

What the paper states is quoted in :data:`PAPER_FACTS`; the values it does not state
(epochs, warmup length, stage boundaries, weight decay, optimizer) come from the cited
original training setups and are marked ``not in the paper`` in :class:`Recipe`'s fields
so a reader can tell them apart. LR is linear in the total batch: ``base_lr * total / 256``
(Goyal et al., 2017), the rule Table 3 uses across batch sizes.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from evonorm_core import uses_batch_statistics

PAPER_FACTS = {
    "base_lr_per_256": "0.1 for ResNets, MobileNetV2 and MnasNet; 0.016 for EfficientNets",
    "mobilenetv2_batch_free_lr": "0.03 (tuned w.r.t. GN-ReLU among 0.01, 0.03, 0.1)",
    "schedules": "multi-stage for ResNets, cosine for MobileNetV2/MnasNet, polynomial for EfficientNets",
    "warmup": "linear warmup (Goyal et al., 2017)",
    "batch_per_worker": "128 at 224x224; EfficientNet-B5: 64 at 456x456",
    "workers": "8 for ResNets, 32 for the others",
    "groups": "32",
}
SCHEDULES = ("multistep", "cosine", "polynomial", "constant")
OPTIMIZERS = ("sgd", "rmsprop")
LR_REFERENCE_BATCH = 256


@dataclass(frozen=True)
class Recipe:
    """One model's ImageNet training setup."""

    base_lr: float  # per 256 images (paper)
    schedule: str  # paper
    batch_per_worker: int = 128  # paper
    workers: int = 32  # paper
    resolution: int = 224  # paper
    epochs: int = 90  # not in the paper (Tables 11/12 use 180)
    warmup_epochs: float = 5.0  # not in the paper (Goyal et al.'s 5 epochs)
    milestones: tuple[float, ...] = ()  # multistep decay epochs, 10x each; not in the paper
    poly_power: float = 2.0  # polynomial decay power; not in the paper
    optimizer: str = "sgd"  # not in the paper (RMSProp is what EfficientNet's 0.016 belongs to)
    weight_decay: float = 1e-4  # not in the paper
    label_smoothing: float = 0.0  # not in the paper
    randaugment: bool = False  # Tables 10-12

    def peak_lr(self, total_batch: int) -> float:
        """The LR after warmup for ``total_batch`` images per step."""
        return scaled_lr(self.base_lr, total_batch)


RESNET = Recipe(base_lr=0.1, schedule="multistep", workers=8, milestones=(30, 60, 80))
MOBILE = Recipe(base_lr=0.1, schedule="cosine", epochs=350, weight_decay=4e-5)
EFFICIENTNET = Recipe(
    base_lr=0.016, schedule="polynomial", epochs=350, optimizer="rmsprop", weight_decay=1e-5, label_smoothing=0.1
)
RECIPES = {
    "resnet50": RESNET,
    "resnet101": RESNET,
    "mobilenetv2": MOBILE,
    "mnasnet_b1": MOBILE,
    "efficientnet_b0": EFFICIENTNET,
    "efficientnet_b5": dataclasses.replace(EFFICIENTNET, batch_per_worker=64, resolution=456),
}
MOBILENETV2_BATCH_FREE_LR = 0.03


def recipe_for(model: str, norm_act: str | None = None, **overrides) -> Recipe:
    """The paper's recipe for ``model`` trained with the registered layer ``norm_act``.

    MobileNetV2 with a layer without batch statistics gets base LR 0.03 (section 5.1: "for
    results presented in Table 3 (layers without batch statistics), the base learning rate
    for MobileNetV2 is lowered to 0.03"); whether a layer has batch statistics is the
    registry's metadata (:func:`evonorm_core.uses_batch_statistics`). ``overrides``
    replace any field (``epochs=180``, ``schedule="cosine"``, ``randaugment=True`` ...),
    e.g. a paper table's setup (:func:`classification.paper_tables.table_recipe`).
    """
    if model not in RECIPES:
        raise ValueError(f"no recipe for model {model!r}; accepted: {', '.join(RECIPES)}")
    recipe = RECIPES[model]
    if model == "mobilenetv2" and norm_act is not None and not uses_batch_statistics(norm_act):
        recipe = dataclasses.replace(recipe, base_lr=MOBILENETV2_BATCH_FREE_LR)
    fields = [f.name for f in dataclasses.fields(Recipe)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown recipe field(s) {unknown}; accepted: {fields}")
    recipe = dataclasses.replace(recipe, **overrides)
    check_recipe(recipe)
    return recipe


def check_recipe(recipe: Recipe) -> None:
    """Raise ``ValueError`` naming the bad field of ``recipe``."""
    if recipe.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {recipe.schedule!r}; accepted: {', '.join(SCHEDULES)}")
    if recipe.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {recipe.optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
    if not recipe.base_lr > 0 or recipe.epochs <= 0 or recipe.warmup_epochs < 0:
        raise ValueError(f"base_lr and epochs must be positive and warmup_epochs >= 0, got {recipe}")


def scaled_lr(base_lr: float, total_batch: int) -> float:
    """Linear scaling: ``base_lr`` is per 256 images."""
    return base_lr * total_batch / LR_REFERENCE_BATCH


def lr_multiplier(recipe: Recipe, epoch: float) -> float:
    """The schedule's factor on the peak LR at (fractional) ``epoch``, warmup included.

    Warmup rises linearly from 0 to 1 over ``warmup_epochs``; the decay schedules run over
    the whole of ``epochs`` (as in Goyal et al., the warmup is part of the schedule).
    """
    if recipe.warmup_epochs > 0 and epoch < recipe.warmup_epochs:
        return epoch / recipe.warmup_epochs
    progress = min(epoch / recipe.epochs, 1.0)
    if recipe.schedule == "multistep":
        return 0.1 ** sum(epoch >= m for m in recipe.milestones)
    if recipe.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if recipe.schedule == "polynomial":
        return (1.0 - progress) ** recipe.poly_power
    return 1.0


class RecipeLR(torch.optim.lr_scheduler.LambdaLR):
    """A per-step scheduler following :func:`lr_multiplier`; ``steps_per_epoch`` converts steps.

    Its ``state_dict`` holds plain data only (the step count and LRs), so checkpoints load
    with ``weights_only=True``; the recipe itself is rebuilt from the run's configuration.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, recipe: Recipe, steps_per_epoch: float) -> None:
        super().__init__(optimizer, lambda step: lr_multiplier(recipe, step / steps_per_epoch))


def build_optimizer(model: nn.Module, recipe: Recipe, lr: float) -> torch.optim.Optimizer:
    """SGD (Nesterov, momentum 0.9) or RMSProp (decay 0.9, momentum 0.9, eps 1e-3, EfficientNet's).

    Weight decay applies to convolution and linear weights only, not to the norm-act
    layers' per-channel vectors or biases.
    """
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if recipe.optimizer == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr, alpha=0.9, momentum=0.9, eps=1e-3)
    return torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True)
