"""Named settings for ``search/evolve.py``: the paper's, and a CPU preset sized so the
default run finishes in about 15 minutes on 2 cores. Every value has its own flag."""
from __future__ import annotations

# Evolution (paper section 5.1 / Appendix C) and proxy training (Appendix B/C).
PAPER = {
    "image_size": 32, "crop_size": 24, "batch_size": 128, "eval_batch_size": 512,
    "train_steps": {"B": 2000, "S": 5000}, "schedule": {"B": "constant", "S": "cosine"},
    "quality_steps": 100, "quality_threshold": 0.2,
    "stability_steps": 100, "stability_threshold": 1e8, "stability_batch_size": 32, "stability_anchors": None,
    "window": 2500, "tournament_fraction": 0.05, "initial_population": 25,
    "bn_momentum": 0.1, "time_budget": None, "time_limit": None,
}

# Small images (digits are 8x8 at heart), short training, a smaller window; the anchors,
# the stages and the evolution are the paper's. The stability test runs on the first
# anchor only. The layer momentum is raised so moving averages settle within the few
# training steps (with 0.1, eval-mode BN-ReLU ResNet50-CIFAR is at chance after 20 steps;
# with 0.3 at 28% after 30), and the quality threshold is 1.5x chance instead of 2x.
CPU = {
    "image_size": 16, "crop_size": 12, "batch_size": 32, "eval_batch_size": 512,
    "train_steps": {"B": 50, "S": 50}, "schedule": {"B": "constant", "S": "cosine"},
    "quality_steps": 20, "quality_threshold": 0.15,
    "stability_steps": 5, "stability_threshold": 1e8, "stability_batch_size": 8, "stability_anchors": 1,
    "window": 100, "tournament_fraction": 0.05, "initial_population": 4,
    "bn_momentum": 0.3, "time_budget": 780.0, "time_limit": 600.0,
}

PRESETS = {"cpu": CPU, "paper": PAPER}


def preset_value(preset: str, key: str, mode: str):
    """The ``preset``'s value for ``key`` (per-mode values resolved for ``mode``)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; accepted: {list(PRESETS)}")
    value = PRESETS[preset][key]
    return value[mode] if isinstance(value, dict) else value
