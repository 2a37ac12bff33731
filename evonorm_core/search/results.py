"""What evaluating a candidate layer produced: :class:`Stage`, :class:`CandidateResult`
and the logged :class:`CandidateRecord`.

Every rejection stage is declared once, here, cheapest first (paper section 4.4, plus the
two ways an evaluation can fail for reasons of its own):

========== ================================================================================
static     output independent of ``x``, or non-finite output/gradient on random input
quality    validation accuracy below the threshold after the quality steps on any anchor
           (or a non-finite loss before it)
stability  worst-case gradient norm under adversarial ascent above the threshold
fitness    the loss became non-finite during the rest of the training
timeout    the evaluation ran past the per-candidate time limit
crash      the evaluation raised, or its worker process died
========== ================================================================================

Every producer (the driver's static check and cache, the executors, the proxy task) builds
a :class:`CandidateResult`; the search log holds one :class:`CandidateRecord` per line.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping


class Stage(str, enum.Enum):
    """Where a candidate was rejected (a ``str``, so it is its own JSON form)."""

    STATIC = "static"
    QUALITY = "quality"
    STABILITY = "stability"
    FITNESS = "fitness"
    TIMEOUT = "timeout"
    CRASH = "crash"

    def __str__(self) -> str:
        return self.value

    @property
    def transient(self) -> bool:
        """A time-out or crash says nothing certain about the layer: it is not cached."""
        return self in (Stage.TIMEOUT, Stage.CRASH)


STAGES = tuple(stage.value for stage in Stage)
"""The stage names, cheapest first."""

ACCEPTED, REJECTED = "accepted", "rejected"


def _plain_floats(values: Mapping[str, Any], what: str) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{what}[{key!r}] must be a number, got {value!r}")
        out[str(key)] = float(value)
    return out


@dataclass(frozen=True)
class CandidateResult:
    """The outcome of evaluating one candidate.

    ``stage`` is ``None`` exactly when the candidate was accepted. ``accuracies`` maps
    anchor -> validation accuracy, in anchor order: after the full training if accepted,
    else what was measured before the rejection (possibly a prefix of the anchors, or
    nothing). ``timings``: seconds per stage.
    """

    stage: Stage | None = None
    reason: str = ""
    accuracies: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stage is not None and not isinstance(self.stage, Stage):
            object.__setattr__(self, "stage", Stage(self.stage))
        object.__setattr__(self, "accuracies", _plain_floats(self.accuracies, "accuracies"))
        object.__setattr__(self, "timings", _plain_floats(self.timings, "timings"))

    @classmethod
    def accept(cls, accuracies: Mapping[str, float], timings: Mapping[str, float] | None = None) -> "CandidateResult":
        return cls(None, "", dict(accuracies), dict(timings or {}))

    @classmethod
    def reject(
        cls, stage: Stage | str, reason: str, accuracies: Mapping[str, float] | None = None,
        timings: Mapping[str, float] | None = None,
    ) -> "CandidateResult":
        return cls(Stage(stage), reason, dict(accuracies or {}), dict(timings or {}))

    @property
    def accepted(self) -> bool:
        return self.stage is None

    @property
    def status(self) -> str:
        """``"accepted"`` or ``"rejected"`` (the log's word)."""
        return ACCEPTED if self.accepted else REJECTED

    @property
    def mean_accuracy(self) -> float:
        """Mean over the anchors measured (NaN if none)."""
        values = list(self.accuracies.values())
        return sum(values) / len(values) if values else math.nan

    def with_timings(self, timings: Mapping[str, float]) -> "CandidateResult":
        return replace(self, timings=dict(timings))

    def to_dict(self) -> dict:
        return {"status": self.status, "stage": None if self.stage is None else self.stage.value,
                "reason": self.reason, "accuracies": dict(self.accuracies), "timings": dict(self.timings)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CandidateResult":
        """Inverse of :meth:`to_dict`; ``ValueError`` naming what is wrong."""
        status, stage = data.get("status"), data.get("stage")
        if status not in (ACCEPTED, REJECTED):
            raise ValueError(f"status must be {ACCEPTED!r} or {REJECTED!r}, got {status!r}")
        if (status == ACCEPTED) != (stage is None):
            raise ValueError(f"status {status!r} does not go with stage {stage!r}")
        if stage is not None and stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; accepted: {list(STAGES)}")
        return cls(None if stage is None else Stage(stage), str(data.get("reason") or ""),
                   dict(data.get("accuracies") or {}), dict(data.get("timings") or {}))


@dataclass(frozen=True)
class CandidateRecord:
    """One line of the search log: a candidate, where it came from, and its result.

    ``candidate_id``: 0, 1, ... in proposal order (reference layers: -1, -2, ...);
    ``origin``: ``"random"``, ``"mutation"`` (of ``parent``) or ``"baseline:<name>"``;
    ``fingerprint``: its function's equivalence-cache key; ``cache_hit``: the result was
    reused from an equivalent candidate; ``wall_time``: seconds from dispatch to result;
    ``elapsed``: seconds into the search when it finished.
    """

    candidate_id: int
    genome: dict
    expression: str
    origin: str
    parent: int | None
    fingerprint: str
    result: CandidateResult
    cache_hit: bool = False
    wall_time: float = 0.0
    elapsed: float = 0.0

    # The result's fields, read through the record.
    @property
    def accepted(self) -> bool:
        return self.result.accepted

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def stage(self) -> Stage | None:
        return self.result.stage

    @property
    def reason(self) -> str:
        return self.result.reason

    @property
    def accuracies(self) -> dict[str, float]:
        return self.result.accuracies

    @property
    def mean_accuracy(self) -> float:
        return self.result.mean_accuracy

    @property
    def trained(self) -> bool:
        """Whether this record cost training (not a static rejection, not a cache hit)."""
        return not self.cache_hit and self.stage is not Stage.STATIC

    def to_dict(self) -> dict:
        """The log line: the result's fields flattened in (``status``, ``stage``, ...)."""
        return {"id": self.candidate_id, "genome": self.genome, "expression": self.expression, "origin": self.origin,
                "parent": self.parent, "fingerprint": self.fingerprint, **self.result.to_dict(),
                "cache_hit": self.cache_hit, "wall_time": self.wall_time, "elapsed": self.elapsed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CandidateRecord":
        """Inverse of :meth:`to_dict`; ``ValueError``/``KeyError`` say what is missing or wrong."""
        missing = [k for k in ("id", "genome", "expression", "origin", "fingerprint", "status") if k not in data]
        if missing:
            raise ValueError(f"candidate record lacks {missing}")
        return cls(int(data["id"]), dict(data["genome"]), str(data["expression"]), str(data["origin"]),
                   data.get("parent"), str(data["fingerprint"]), CandidateResult.from_dict(data),
                   bool(data.get("cache_hit", False)), float(data.get("wall_time", 0.0)), float(data.get("elapsed", 0.0)))
