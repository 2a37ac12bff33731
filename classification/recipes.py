"""The paper's ImageNet training recipes (section 5.1, Appendix C), in the paper's units.

What the paper states is quoted in :data:`PAPER_FACTS`; the values it does not state
(epochs, warmup length, stage boundaries, weight decay, optimizer) come from the cited
original training setups and are marked ``not in the paper`` in :class:`Recipe`'s fields
so a reader can tell them apart. A recipe is written in epochs and LR per 256 images; LR is
linear in the total batch: ``base_lr * total / 256`` (Goyal et al., 2017), the rule Table 3
uses across batch sizes. The launcher converts a recipe once into the classifiers' trainer
settings, an absolute learning rate (:meth:`Recipe.optimizer_settings`) and a schedule in
steps (:meth:`Recipe.schedule_in_steps`). :data:`PROXY_RECIPE` trains a CIFAR anchor as the
proxy task does (:data:`evonorm_core.classifiers.proxy_task.PROXY_TRAINING`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evonorm_core import uses_batch_statistics
from evonorm_core.classifiers.optimizer import OPTIMIZERS, OptimizerSettings
from evonorm_core.classifiers.proxy_task import PROXY_TRAINING
from evonorm_core.classifiers.schedule import SCHEDULES, ScheduleSettings

PAPER_FACTS = {
    "base_lr_per_256": "0.1 for ResNets, MobileNetV2 and MnasNet; 0.016 for EfficientNets",
    "mobilenetv2_batch_free_lr": "0.03 (tuned w.r.t. GN-ReLU among 0.01, 0.03, 0.1)",
    "schedules": "multi-stage for ResNets, cosine for MobileNetV2/MnasNet, polynomial for EfficientNets",
    "warmup": "linear warmup (Goyal et al., 2017)",
    "batch_per_worker": "128 at 224x224; EfficientNet-B5: 64 at 456x456",
    "workers": "8 for ResNets, 32 for the others",
    "groups": "32",
}
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

    def optimizer_settings(self, total_batch: int) -> OptimizerSettings:
        """The optimizer at the peak LR for ``total_batch`` images per step."""
        return OptimizerSettings(self.optimizer, lr=self.peak_lr(total_batch), weight_decay=self.weight_decay)

    def schedule_in_steps(self, steps_per_epoch: float) -> ScheduleSettings:
        """The LR schedule with its epochs (length, warmup, milestones) converted to optimizer steps."""
        if not steps_per_epoch > 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch!r}")
        return ScheduleSettings(
            self.schedule, total_steps=self.epochs * steps_per_epoch, warmup_steps=self.warmup_epochs * steps_per_epoch,
            milestones=tuple(m * steps_per_epoch for m in self.milestones), poly_power=self.poly_power,
        )


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
# A CIFAR anchor trained on its own: the proxy task's optimizer at its batch (0.1 at 128 images is
# 0.2 per 256), one worker, no warmup; the 30 cosine epochs are this launcher's, not the paper's.
PROXY_RECIPE = Recipe(
    base_lr=PROXY_TRAINING.optimizer.lr * LR_REFERENCE_BATCH / PROXY_TRAINING.batch_size, schedule="cosine",
    batch_per_worker=PROXY_TRAINING.batch_size, workers=1, resolution=PROXY_TRAINING.image_size, epochs=30,
    warmup_epochs=0.0, optimizer=PROXY_TRAINING.optimizer.name, weight_decay=PROXY_TRAINING.optimizer.weight_decay,
)


def recipe_for(model: str, norm_act: str | None = None, **overrides) -> Recipe:
    """The paper's recipe for ``model`` trained with the registered layer ``norm_act``.

    MobileNetV2 with a layer without batch statistics gets base LR 0.03 (section 5.1: "for
    results presented in Table 3 (layers without batch statistics), the base learning rate
    for MobileNetV2 is lowered to 0.03"); whether a layer has batch statistics is the
    registry's metadata (:func:`evonorm_core.uses_batch_statistics`). ``overrides``
    replace any field (``epochs=180``, ``schedule="cosine"``, ``randaugment=True`` ...),
    e.g. a paper table's setup (:func:`evonorm_suite.classification.paper_tables.table_recipe`).
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
