"""Whether a training curve has flattened: the statistic reports show beside each run's result.

A run is called converged when its validation curve is flat over the last fifth of training.
:func:`last_fifth_flatness` measures that on the per-epoch curve: the range (max - min) and the
least-squares slope per epoch of its last fifth (at least two points), in the curve's units.
"""
from __future__ import annotations

import math
from typing import Sequence

TAIL_FRACTION = 0.2


def last_fifth_flatness(curve: Sequence[float]) -> dict[str, float | int] | None:
    """``{"points", "range", "slope"}`` of the last fifth of ``curve`` (one value per epoch): how many
    values it holds (a fifth rounded up, at least 2), their max - min, and their least-squares slope
    per epoch. None for a curve of fewer than 2 values or with a non-finite value in that tail."""
    if len(curve) < 2:
        return None
    points = max(2, math.ceil(len(curve) * TAIL_FRACTION))
    tail = [float(v) for v in curve[-points:]]
    if not all(math.isfinite(v) for v in tail):
        return None
    centre = (points - 1) / 2
    mean = sum(tail) / points
    slope = sum((i - centre) * (v - mean) for i, v in enumerate(tail)) / sum((i - centre) ** 2 for i in range(points))
    return {"points": points, "range": max(tail) - min(tail), "slope": slope}
