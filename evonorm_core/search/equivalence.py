"""Functional-equivalence cache (beyond the paper; the idea of AutoML-Zero, Real et al. 2020).

Two genomes that compute the same function (``max(x, x)`` and ``x``, ``x * v1`` and
``v1 * x``, graphs differing only in dead nodes) would train identically, so the second
reuses the first's evaluation. :func:`fingerprint` hashes a layer's outputs on fixed
random inputs with fixed, different random ``v0``/``v1`` (so ``x * v1``, ``x * v0`` and
``x`` differ), in
training and then in eval mode (so moving averages count), rounded so float noise does
not split equal functions.

The cache asks for the *same training*; reports and the population ask a coarser question,
whether two candidates are the *same layer* (:func:`same_layer`): their outputs on the
probe inputs, at the parameters every candidate starts from (``v0 = 0``, ``v1 = 1``),
agree within :data:`SAME_LAYER_RTOL` / :data:`SAME_LAYER_ATOL`. Subgraphs that depend on
neither ``x`` nor a parameter are evaluated, i.e. folded to their constant value, so
``tanh(x + channel_rms(group_rms(0)))`` (a shift of about 0.004) is ``tanh(x)``;
``tanh(x + log(abs(v0)))`` and ``tanh(x + log(square(v1)))`` start as ``tanh(x)`` too.
:class:`DistinctLayers` groups candidates by that rule (greedily, in the order given).
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

from .genome import Genome
from .layer import GraphLayer

FINGERPRINT_SHAPE = (4, 8, 3, 3)  # 8 channels in 4 groups of 2 (groups are chosen explicitly)
_DECIMALS = 6
SAME_LAYER_RTOL = 1e-2
SAME_LAYER_ATOL = 1e-2


def probe_outputs(genome: Genome, random_parameters: bool = True) -> list[torch.Tensor]:
    """The layer's outputs (float64, before the affine) on the fixed probe inputs: two
    training-mode batches, then the first batch in eval mode. ``random_parameters``: ``v0``
    and ``v1`` take fixed random values (else their initial 0 and 1)."""
    generator = torch.Generator().manual_seed(20200406)
    n, c, h, w = FINGERPRINT_SHAPE
    layer = GraphLayer(genome, c, groups=4).double()
    with torch.no_grad():
        for name in ("v0", "v1"):  # both drawn always, so x * v0 and x * v1 get different values
            value = torch.randn(c, generator=generator, dtype=torch.float64)
            if random_parameters and hasattr(layer, name):
                getattr(layer, name).copy_(value)
        inputs = [torch.randn(FINGERPRINT_SHAPE, generator=generator, dtype=torch.float64) * 2 + 0.5 for _ in range(2)]
        outputs = [layer(batch) for batch in inputs]
        layer.eval()
        outputs.append(layer(inputs[0]))
    return outputs


def fingerprint(genome: Genome) -> str:
    """A hex digest equal for genomes computing the same function on the probe inputs.

    Each output value is hashed as its kind (finite, NaN, +inf, -inf) and, if finite, its decimal exponent
    and its mantissa rounded to :data:`_DECIMALS` decimals (values below 1 in magnitude: the value itself,
    rounded absolutely; -0.0 as 0.0), so float noise does not split equal functions at any magnitude, and a
    value is never confused with 10 times itself or with an infinity."""
    digest = hashlib.sha256()
    for out in probe_outputs(genome):
        kind = torch.zeros(out.shape, dtype=torch.int8)
        kind[out.isnan()] = 1
        kind[out == torch.inf] = 2
        kind[out == -torch.inf] = 3
        finite = torch.where(kind == 0, out, torch.zeros_like(out))
        exponent = torch.floor(torch.log10(finite.abs())).clamp_min(0.0)  # relative to the size above 1 (0: -inf)
        mantissa = torch.round(finite / 10.0 ** exponent, decimals=_DECIMALS)
        mantissa[mantissa == 0] = 0.0  # float noise just below 0 rounds to -0.0, whose bytes are not 0.0's
        for part in (kind, exponent, mantissa):
            digest.update(part.numpy().tobytes())
    return digest.hexdigest()[:24]


def initial_response(genome: Genome) -> torch.Tensor:
    """:func:`probe_outputs` at the initial parameters, flattened into one float64 vector."""
    return torch.cat([out.flatten() for out in probe_outputs(genome, random_parameters=False)])


def same_layer(response: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether two :func:`initial_response` vectors agree within the stated tolerance (NaN
    equals NaN, an infinity equals the infinity of its sign)."""
    return bool(torch.allclose(response, other, rtol=SAME_LAYER_RTOL, atol=SAME_LAYER_ATOL, equal_nan=True))


class DistinctLayers:
    """Candidates grouped by :func:`same_layer`: each joins the first group whose
    representative (its first member) it matches, or starts a group of its own."""

    def __init__(self) -> None:
        self.representatives: list[tuple[object, torch.Tensor]] = []

    def match(self, response: torch.Tensor) -> object | None:
        """The key of the group ``response`` belongs to, or None."""
        return next((key for key, rep in self.representatives if same_layer(response, rep)), None)

    def add(self, key: object, response: torch.Tensor) -> bool:
        """Group ``key``; True if it starts a new group (a distinct layer)."""
        if self.match(response) is not None:
            return False
        self.representatives.append((key, response))
        return True

    def __len__(self) -> int:
        return len(self.representatives)


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
