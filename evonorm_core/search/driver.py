"""The search loop: propose, reject cheaply, dispatch, record, checkpoint.

:class:`LayerSearch` runs the static rejection and the equivalence-cache lookup itself
(milliseconds) and hands the remaining candidates to an :class:`Executor` that trains
them (quality, stability and fitness; see ``search/proxy.py``), several at a time. After
every trained candidate it writes a checkpoint (atomically) with everything needed to
continue exactly: the random state, the population, the cache, the candidates still in
flight and how many records of ``candidates.jsonl`` (the history, one JSON line per
candidate) it covers; :meth:`LayerSearch.resume` picks it up. Records that took no
training (static rejections, cache hits: milliseconds each) are checkpointed with the next
trained one or after ``CHECKPOINT_INTERVAL`` seconds; after a kill they are proposed and
recorded again, identically, from the checkpointed random state.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from .equivalence import EquivalenceCache, fingerprint
from .evolution import EvolutionConfig, Member, Proposer
from .expression import to_infix
from .genome import Genome
from .rejection import static_rejection

CHECKPOINT = "checkpoint.json"
LOG = "candidates.jsonl"
CHECKPOINT_INTERVAL = 10.0  # seconds


def read_checkpoint(output_dir: str) -> dict:
    """The checkpoint of the run in ``output_dir`` with its ``records`` (the first
    ``logged`` lines of the log); ``FileNotFoundError`` saying so if there is none."""
    path = os.path.join(output_dir, CHECKPOINT)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no search checkpoint {CHECKPOINT} in {output_dir!r}")
    with open(path) as f:
        state = json.load(f)
    state["records"] = []
    if state["logged"]:
        with open(os.path.join(output_dir, LOG)) as f:
            state["records"] = [json.loads(line) for line, _ in zip(f, range(state["logged"]))]
    if len(state["records"]) != state["logged"]:
        raise ValueError(f"{LOG} in {output_dir!r} has {len(state['records'])} records, the checkpoint covers {state['logged']}")
    return state


class Executor(Protocol):
    """Trains candidates elsewhere (in-process, a process pool, Ray tasks)."""

    capacity: int

    def submit(self, candidate_id: int, genome: dict) -> None:
        """Start evaluating ``genome`` (a :meth:`Genome.to_dict`)."""

    def wait(self) -> list[tuple[int, dict]]:
        """Block until at least one candidate finished; ``(id, result)`` for each. A result
        has ``status`` ("accepted"/"rejected"), ``stage``, ``reason`` and ``accuracies``;
        crashes and time-outs come back as rejections."""

    def close(self) -> None:
        ...


@dataclass
class StopCondition:
    """Stop proposing after ``max_candidates`` candidates or ``time_budget`` seconds (either may be None)."""

    max_candidates: int | None = None
    time_budget: float | None = None

    def reached(self, proposed: int, elapsed: float) -> bool:
        return (self.max_candidates is not None and proposed >= self.max_candidates) or (
            self.time_budget is not None and elapsed >= self.time_budget
        )


@dataclass
class _Pending:
    candidate_id: int
    genome: Genome
    origin: str
    parent: int | None
    fingerprint: str
    started: float = field(default_factory=time.monotonic)

    def to_dict(self) -> dict:
        return {"id": self.candidate_id, "genome": self.genome.to_dict(), "origin": self.origin,
                "parent": self.parent, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: dict) -> "_Pending":
        return cls(data["id"], Genome.from_dict(data["genome"]), data["origin"], data["parent"], data["fingerprint"])


_RESULT_KEYS = ("status", "stage", "reason", "accuracies", "timings")


def member_from_record(record: dict) -> Member:
    """The population :class:`Member` of a logged candidate record."""
    return Member(record["id"], Genome.from_dict(record["genome"]), tuple(record["accuracies"].values()),
                  record["fingerprint"])


class LayerSearch:
    """One search run writing to ``output_dir``.

    ``baselines`` (name -> genome) are evaluated first, through the same executor, and
    kept apart from the population; ``on_record(search, record)`` is called after each
    finished candidate (progress display).
    """

    def __init__(
        self,
        config: EvolutionConfig,
        executor: Executor,
        output_dir: str,
        seed: int = 0,
        baselines: dict[str, Genome] | None = None,
        on_record: Callable[["LayerSearch", dict], None] | None = None,
        metadata: dict | None = None,
    ) -> None:
        self.config, self.executor, self.output_dir = config, executor, output_dir
        self.seed, self.on_record, self.metadata = seed, on_record, metadata or {}
        self.proposer = Proposer(config, random.Random(seed))
        self.cache = EquivalenceCache()
        self.records: list[dict] = []
        self.baselines: dict[str, dict] = {}
        self.next_id = 0
        self.elapsed_before = 0.0
        self.in_flight: dict[int, _Pending] = {}
        self.resubmit: list[_Pending] = []
        self._started: float | None = None
        self._checkpointed = 0.0
        self.todo_baselines = {name: genome for name, genome in (baselines or {}).items()}
        os.makedirs(output_dir, exist_ok=True)

    # ----------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict:
        version, internal, gauss = self.proposer.rng.getstate()
        return {
            "config": asdict(self.config),
            "seed": self.seed,
            "metadata": self.metadata,
            "rng": [version, list(internal), gauss],
            "next_id": self.next_id,
            "elapsed": self.elapsed(),
            "logged": len(self.records),
            "baselines": self.baselines,
            "todo_baselines": {name: g.to_dict() for name, g in self.todo_baselines.items()},
            "population": [m.candidate_id for m in self.proposer.population],
            "cache": self.cache.state_dict(),
            "in_flight": [p.to_dict() for p in sorted(self.in_flight.values(), key=lambda p: p.candidate_id)],
        }

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.proposer.rng.setstate((version, tuple(internal), gauss))
        self.next_id, self.elapsed_before = state["next_id"], state["elapsed"]
        self.records, self.baselines = state["records"], state["baselines"]
        self.todo_baselines = {name: Genome.from_dict(g) for name, g in state["todo_baselines"].items()}
        by_id = {r["id"]: r for r in self.records}
        for candidate_id in state["population"]:
            record = by_id[candidate_id]
            self.proposer.add(member_from_record(record))
        self.cache.load_state_dict(state["cache"])
        self.resubmit = [_Pending.from_dict(p) for p in state["in_flight"]]

    def checkpoint(self) -> None:
        self._checkpointed = time.monotonic()
        path = os.path.join(self.output_dir, CHECKPOINT)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def resume(cls, executor: Executor, output_dir: str, **kwargs: Any) -> "LayerSearch":
        """Continue the run checkpointed in ``output_dir`` (its config, seed and metadata)."""
        state = read_checkpoint(output_dir)
        search = cls(EvolutionConfig(**state["config"]), executor, output_dir, state["seed"],
                     metadata=state["metadata"], **kwargs)
        search.load_state_dict(state)
        with open(os.path.join(output_dir, LOG), "w") as f:  # drop lines written after the checkpoint
            f.writelines(json.dumps(r) + "\n" for r in search.records)
        return search

    # ----------------------------------------------------------------------- the loop
    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self._started if self._started is not None else 0.0)

    def run(self, stop: StopCondition) -> list[dict]:
        """Search until ``stop`` is reached and every candidate in flight has finished."""
        self._started = time.monotonic()
        for pending in self.resubmit:
            self._submit(pending)
        self.resubmit = []
        names = sorted({*self.baselines, *self.todo_baselines})
        for name, genome in self.todo_baselines.items():
            if not any(p.origin == f"baseline:{name}" for p in self.in_flight.values()):
                self._submit(_Pending(-1 - names.index(name), genome, f"baseline:{name}", None, fingerprint(genome)))
        while True:
            while len(self.in_flight) < self.executor.capacity and not stop.reached(self.next_id, self.elapsed()):
                self._dispatch(self._propose())
            if not self.in_flight:
                self.checkpoint()
                return self.records
            for candidate_id, result in self.executor.wait():
                self._finish(self.in_flight.pop(candidate_id), result)

    def _propose(self) -> _Pending:
        genome, origin, parent = self.proposer.propose()
        pending = _Pending(self.next_id, genome, origin, parent, fingerprint(genome))
        self.next_id += 1
        return pending

    def _dispatch(self, pending: _Pending) -> None:
        """Record at once what needs no training (static rejects, cache hits), else submit."""
        reason = static_rejection(pending.genome)
        if reason is not None:
            result = {"status": "rejected", "stage": "static", "reason": reason, "accuracies": {}, "timings": {}}
            self._record(pending, result, cache_hit=False)
            return
        cached = self.cache.lookup(pending.fingerprint)
        if cached is not None:
            self._record(pending, {**cached, "timings": {}}, cache_hit=True)
            return
        self._submit(pending)

    def _submit(self, pending: _Pending) -> None:
        pending.started = time.monotonic()
        self.in_flight[pending.candidate_id] = pending
        self.executor.submit(pending.candidate_id, pending.genome.to_dict())

    def _finish(self, pending: _Pending, result: dict) -> None:
        result = {key: result.get(key) for key in _RESULT_KEYS} | {
            "accuracies": result.get("accuracies") or {}, "timings": result.get("timings") or {}}
        if result["stage"] not in ("timeout", "crash"):  # a crash may be transient: do not cache it
            self.cache.store(pending.fingerprint, result)
        if pending.origin.startswith("baseline:"):
            name = pending.origin.split(":", 1)[1]
            self.baselines[name] = self._make_record(pending, result, cache_hit=False)
            self.todo_baselines.pop(name, None)
            self.checkpoint()
            if self.on_record is not None:
                self.on_record(self, self.baselines[name])
            return
        self._record(pending, result, cache_hit=False, trained=True)

    def _joins_population(self, record: dict) -> bool:
        if record["status"] == "accepted":
            return True
        return self.config.admit_quality_rejected and record["stage"] == "quality" and bool(record["accuracies"])

    def _make_record(self, pending: _Pending, result: dict, cache_hit: bool) -> dict:
        return {
            "id": pending.candidate_id,
            "genome": pending.genome.to_dict(),
            "expression": to_infix(pending.genome),
            "origin": pending.origin,
            "parent": pending.parent,
            "fingerprint": pending.fingerprint,
            **{key: result[key] for key in _RESULT_KEYS},
            "cache_hit": cache_hit,
            "wall_time": round(time.monotonic() - pending.started, 3),
            "elapsed": round(self.elapsed(), 3),
        }

    def _record(self, pending: _Pending, result: dict, cache_hit: bool, trained: bool = False) -> None:
        record = self._make_record(pending, result, cache_hit)
        self.records.append(record)
        if self._joins_population(record):
            self.proposer.add(member_from_record(record))
        with open(os.path.join(self.output_dir, LOG), "a") as f:
            f.write(json.dumps(record) + "\n")
        if trained or time.monotonic() - self._checkpointed > CHECKPOINT_INTERVAL:
            self.checkpoint()
        if self.on_record is not None:
            self.on_record(self, record)
