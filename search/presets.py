"""Named settings for ``search/evolve.py``: the paper's, and a CPU preset sized so the default
run finishes in about 15 minutes on 2 cores. Each is a :class:`~evonorm_suite.search.config.SearchConfig`
per search mode; every value can still be changed by its own flag.

``paper`` (Appendix B, section 4.4): CIFAR-10 (from ``--data-dir``; nothing is downloaded) at
32 px with 24 px crops, batch 128, SGD lr 0.1, 2000 constant-LR steps for the B search and 5000 cosine steps for the S search, quality
test after 100 steps at 20%, stability test of 100 ascent steps at 1e8 on every anchor,
window 2500, tournaments of 5%, quality-rejected candidates discarded, no time limits.

``cpu`` (the default): the same anchors, stages and evolution rules, shrunk to fit 2 cores, on
the embedded 28 px MNIST digits with the paper's 24 px crops, the population started from the
reference layers (a random start accepted nothing in 13 minutes); the measurements behind each
choice are in docs/search.md ("Choosing the CPU preset") and docs/results/search/.
"""
from __future__ import annotations

import dataclasses

from evonorm_core.search.evolution import EvolutionConfig
from evonorm_suite.search.config import DEFAULT_REFERENCES, SearchConfig
from evonorm_suite.search.proxy import ProxyConfig

MODES = ("B", "S")


def _paper(mode: str) -> SearchConfig:
    proxy = ProxyConfig(data="cifar10", train_steps=2000 if mode == "B" else 5000,
                        schedule="constant" if mode == "B" else "cosine")
    return SearchConfig(proxy=proxy, evolution=EvolutionConfig(mode=mode), preset="paper",
                        references=DEFAULT_REFERENCES[mode])


def _cpu(mode: str) -> SearchConfig:
    proxy = ProxyConfig(
        data="mnist", image_size=28, crop_size=24,  # real 28 px digits, the paper's 24 px crops
        # MNIST digits sit in a black frame: whole 28 px images would change per-sample statistics from the crops'
        validation="centre",
        anchor_depth=0.01,  # one block per stage (same model code): fits 100 steps on a CPU and still ranks
        batch_size=32, lr=0.03,  # the paper's 0.1 at batch 128, scaled linearly to batch 32
        eval_batch_size=64,  # same numbers as 512 (validation reads moving averages), 2-3x faster on a CPU
        train_steps=100, schedule="constant",  # cosine over 100 steps failed GN-ReLU on 1 of 3 seeds (docs/search.md)
        quality_steps=50, quality_threshold=0.2,
        # explosions need depth: full-depth MobileNetV2-CIFAR, where section 4.4's example explodes in a few steps
        stability_steps=10, stability_batch_size=8, stability_lr=0.05, stability_anchors=("mobilenetv2_cifar",),
        stability_depth=1.0,
        recalibration_batches=4,  # moving averages lag the weights after so few steps
    )
    # a random start accepted no layer in the 13 minutes (docs/search.md): start from the references instead
    evolution = EvolutionConfig(mode=mode, window=100, initial_population=4, population_from_references=True)
    return SearchConfig(proxy=proxy, evolution=evolution, preset="cpu", references=DEFAULT_REFERENCES[mode],
                        time_budget=780.0, time_limit=600.0)


PRESETS = {"cpu": _cpu, "paper": _paper}
DEFAULT_PRESET = "cpu"


def preset(name: str, mode: str = "B") -> SearchConfig:
    """The ``name`` preset ("cpu" or "paper") for search ``mode`` ("B" or "S")."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}")
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; accepted: {', '.join(MODES)}")
    return PRESETS[name](mode)


def replace_proxy(config: SearchConfig, **fields) -> SearchConfig:
    """``config`` with proxy ``fields`` replaced."""
    return dataclasses.replace(config, proxy=dataclasses.replace(config.proxy, **fields))
