"""Functional-equivalence cache (beyond the paper; the idea of AutoML-Zero, Real et al. 2020).

Two genomes that compute the same function (``max(x, x)`` and ``x``, ``x * v1`` and
``v1 * x``, graphs differing only in dead nodes) would train identically, so the second
reuses the first's evaluation. :func:`fingerprint` hashes a layer's outputs on fixed
random inputs with fixed, different random ``v0``/``v1`` (so ``x * v1``, ``x * v0`` and
``x`` differ), in
training and then in eval mode (so moving averages count), rounded so float noise does
not split equal functions.
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

from .genome import Genome
from .layer import GraphLayer

FINGERPRINT_SHAPE = (4, 8, 3, 3)  # 8 channels in 4 groups of 2 (groups are chosen explicitly)
_DECIMALS = 6


def probe_outputs(genome: Genome) -> list[torch.Tensor]:
    """The layer's outputs (float64, before the affine) on the fixed probe inputs: two
    training-mode batches, then the first batch in eval mode."""
    generator = torch.Generator().manual_seed(20200406)
    n, c, h, w = FINGERPRINT_SHAPE
    layer = GraphLayer(genome, c, groups=4).double()
    with torch.no_grad():
        for name in ("v0", "v1"):  # both drawn always, so x * v0 and x * v1 get different values
            value = torch.randn(c, generator=generator, dtype=torch.float64)
            if hasattr(layer, name):
                getattr(layer, name).copy_(value)
        inputs = [torch.randn(FINGERPRINT_SHAPE, generator=generator, dtype=torch.float64) * 2 + 0.5 for _ in range(2)]
        outputs = [layer(batch) for batch in inputs]
        layer.eval()
        outputs.append(layer(inputs[0]))
    return outputs


def fingerprint(genome: Genome) -> str:
    """A hex digest equal for genomes computing the same function on the probe inputs."""
    digest = hashlib.sha256()
    for out in probe_outputs(genome):
        rounded = torch.nan_to_num(out, nan=7.77e77, posinf=8.88e88, neginf=-8.88e88)
        magnitude = rounded.abs().clamp_min(1.0)  # round relative to the value's size above 1
        scale = 10.0 ** torch.floor(torch.log10(magnitude))
        digest.update(torch.round(rounded / scale, decimals=_DECIMALS).numpy().tobytes())
    return digest.hexdigest()[:24]


class EquivalenceCache:
    """Fingerprint -> result of the first evaluated genome with that fingerprint; counts hits."""

    def __init__(self) -> None:
        self.entries: dict[str, Any] = {}
        self.hits = 0

    def lookup(self, key: str) -> Any | None:
        if key in self.entries:
            self.hits += 1
            return self.entries[key]
        return None

    def store(self, key: str, result: Any) -> None:
        self.entries.setdefault(key, result)

    def state_dict(self) -> dict:
        return {"entries": self.entries, "hits": self.hits}

    def load_state_dict(self, state: dict) -> None:
        self.entries, self.hits = dict(state["entries"]), int(state["hits"])
