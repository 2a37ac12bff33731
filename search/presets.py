"""Named settings for ``search/evolve.py``: the paper's, and a CPU preset sized so the default
run finishes in about 15 minutes on 2 cores. Each is a :class:`~evonorm_suite.search.config.SearchConfig`
per search mode; every value can still be changed by its own flag.

``paper`` (Appendix B, section 4.4): CIFAR-10 at 32 px with 24 px crops, batch 128, SGD lr
0.1, 2000 constant-LR steps for the B search and 5000 cosine steps for the S search, quality
test after 100 steps at 20%, stability test of 100 ascent steps at 1e8 on every anchor,
window 2500, tournaments of 5%, quality-rejected candidates discarded, no time limits.

``cpu`` (the default): the same anchors, stages and evolution, shrunk to fit 2 cores; the
measurements behind each choice are in docs/search.md ("Choosing the CPU preset") and
docs/results/search/.
"""
from __future__ import annotations

import dataclasses

from evonorm_core.search.evolution import EvolutionConfig
from evonorm_suite.search.config import DEFAULT_REFERENCES, SearchConfig
from evonorm_suite.search.proxy import ProxyConfig

MODES = ("B", "S")


def _paper(mode: str) -> SearchConfig:
    proxy = ProxyConfig(train_steps=2000 if mode == "B" else 5000, schedule="constant" if mode == "B" else "cosine")
    return SearchConfig(proxy=proxy, evolution=EvolutionConfig(mode=mode), preset="paper",
                        references=DEFAULT_REFERENCES[mode])


def _cpu(mode: str) -> SearchConfig:
    proxy = ProxyConfig(
        anchor_depth=0.01,  # one block per stage (same model code): full depth learns nothing in 100 steps
        image_size=16, crop_size=16,  # MobileNetV2-CIFAR ends at 2x2 (the paper's 24 px crops end at 3x3)
        batch_size=32, lr=0.03,
        train_steps=100, schedule="constant" if mode == "B" else "cosine",
        quality_steps=50, quality_threshold=0.2,
        stability_steps=5, stability_batch_size=8, stability_anchors=1,
        recalibration_batches=4,  # moving averages lag the weights after so few steps
    )
    evolution = EvolutionConfig(mode=mode, window=100, initial_population=4, admit_quality_rejected=True)
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
