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
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..experiment.config import config_from_dict, config_to_dict
from ..experiment.files import (
    NOT_WRITTEN_HERE,
    CorruptFileError,
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    read_json_object,
    read_jsonl,
)
from .equivalence import EquivalenceCache, fingerprint
from .evolution import EvolutionConfig, Member, Proposer
from .expression import to_infix
from .genome import Genome
from .rejection import static_rejection
from .results import CandidateRecord, CandidateResult, Stage

CHECKPOINT = "checkpoint.json"
LOG = "candidates.jsonl"
CHECKPOINT_INTERVAL = 10.0  # seconds
_STATE_KEYS = ("config", "seed", "metadata", "rng", "next_id", "elapsed", "logged", "baselines", "todo_baselines",
               "population", "cache", "in_flight")


def read_checkpoint(output_dir: str | Path) -> dict:
    """The checkpoint of the run in ``output_dir``, with ``records``: the first ``logged``
    lines of its log as :class:`CandidateRecord` (and ``baselines`` as records too).

    ``FileNotFoundError`` if there is none; :class:`CorruptFileError` naming the file (and
    line) and what to do if the checkpoint or the log is damaged.
    """
    path = Path(output_dir) / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"no search checkpoint {CHECKPOINT} in {str(output_dir)!r}")
    fix = f"{NOT_WRITTEN_HERE}; delete the run folder and start again"
    state = read_json_object(path, what="search checkpoint", keys=_STATE_KEYS, advice=fix)
    counts = {key: state[key] for key in ("seed", "next_id", "logged")}
    if any(type(value) is not int or value < 0 for value in counts.values()):
        raise CorruptFileError(f"search checkpoint {str(path)!r}: {counts} must be integers >= 0; {fix}")
    if not isinstance(state["metadata"], dict) or type(state["elapsed"]) not in (int, float):
        raise CorruptFileError(f"search checkpoint {str(path)!r}: its metadata must be an object and elapsed a "
                               f"number; {fix}")
    try:
        config_from_dict(EvolutionConfig, state["config"], source=str(path))
    except (ValueError, TypeError, AttributeError) as error:  # ConfigError included
        raise CorruptFileError(f"search checkpoint {str(path)!r}: its evolution settings are not this version's "
                               f"({error}); {fix}") from None
    log = Path(output_dir) / LOG
    rows = read_jsonl(log, limit=state["logged"], what="search log") if state["logged"] else []
    if len(rows) != state["logged"]:
        raise CorruptFileError(
            f"search log {str(log)!r} has {len(rows)} records, its checkpoint {str(path)!r} covers {state['logged']}: "
            "the log was truncated; restore it or delete the run folder and start again")
    state["records"], seen = [], set()
    for number, row in enumerate(rows, 1):
        try:
            record = CandidateRecord.from_dict(row)
            Genome.from_dict(record.genome)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise CorruptFileError(f"search log {str(log)!r}, line {number}: not a candidate record ({error}); {fix}") from None
        if record.candidate_id in seen or not 0 <= record.candidate_id < state["next_id"]:
            raise CorruptFileError(f"search log {str(log)!r}, line {number}: candidate id {record.candidate_id} is a "
                                   f"repeat or was never proposed; {fix}")
        seen.add(record.candidate_id)
        state["records"].append(record)
    try:
        state["baselines"] = {name: CandidateRecord.from_dict(row) for name, row in state["baselines"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise CorruptFileError(f"search checkpoint {str(path)!r}: bad reference-layer record ({error}); {fix}") from None
    return state


class Executor(Protocol):
    """Trains candidates elsewhere (in-process, a process pool, Ray tasks)."""

    capacity: int

    def submit(self, candidate_id: int, genome: dict) -> None:
        """Start evaluating ``genome`` (a :meth:`Genome.to_dict`)."""

    def wait(self) -> list[tuple[int, CandidateResult]]:
        """Block until at least one candidate finished; ``(id, result)`` for each. Crashes
        and time-outs come back as rejections (stages ``crash``/``timeout``)."""

    def close(self) -> None:
        ...


@dataclass(frozen=True)
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


def member_from_record(record: CandidateRecord) -> Member:
    """The population :class:`Member` of a logged candidate record."""
    return Member(record.candidate_id, Genome.from_dict(record.genome), tuple(record.accuracies.values()))


class LayerSearch:
    """One search run writing to ``output_dir`` (which the caller owns, e.g. through
    :class:`evonorm_core.experiment.rundir.RunDir`).

    ``baselines`` (name -> genome) are evaluated first, through the same executor, and
    kept apart from the population unless ``config.population_from_references``; ``on_record(search, record)`` is called after each
    finished candidate (progress display).
    """

    def __init__(
        self,
        config: EvolutionConfig,
        executor: Executor,
        output_dir: str | Path,
        seed: int = 0,
        baselines: dict[str, Genome] | None = None,
        on_record: Callable[["LayerSearch", CandidateRecord], None] | None = None,
        metadata: dict | None = None,
    ) -> None:
        self.config, self.executor, self.output_dir = config, executor, Path(output_dir)
        self.seed, self.on_record, self.metadata = seed, on_record, metadata or {}
        self.proposer = Proposer(config, random.Random(seed))
        self.cache = EquivalenceCache()
        self.records: list[CandidateRecord] = []
        self.baselines: dict[str, CandidateRecord] = {}
        self.next_id = 0
        self.elapsed_before = 0.0
        self.in_flight: dict[int, _Pending] = {}
        self.resubmit: list[_Pending] = []
        self._started: float | None = None
        self._checkpointed = 0.0
        self.todo_baselines = dict(baselines or {})
        self.output_dir.mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict:
        version, internal, gauss = self.proposer.rng.getstate()
        return {
            "config": config_to_dict(self.config),
            "seed": self.seed,
            "metadata": self.metadata,
            "rng": [version, list(internal), gauss],
            "next_id": self.next_id,
            "elapsed": self.elapsed(),
            "logged": len(self.records),
            "baselines": {name: record.to_dict() for name, record in self.baselines.items()},
            "todo_baselines": {name: g.to_dict() for name, g in self.todo_baselines.items()},
            "population": [m.candidate_id for m in self.proposer.population],
            "cache": self.cache.state_dict(),
            "in_flight": [p.to_dict() for p in sorted(self.in_flight.values(), key=lambda p: p.candidate_id)],
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from :func:`read_checkpoint`'s ``state`` (records already parsed)."""
        version, internal, gauss = state["rng"]
        self.proposer.rng.setstate((version, tuple(internal), gauss))
        self.next_id, self.elapsed_before = state["next_id"], state["elapsed"]
        self.records, self.baselines = list(state["records"]), dict(state["baselines"])
        self.todo_baselines = {name: Genome.from_dict(g) for name, g in state["todo_baselines"].items()}
        by_id = {r.candidate_id: r for r in (*self.records, *self.baselines.values())}
        for candidate_id in state["population"]:
            self.proposer.add(member_from_record(by_id[candidate_id]))
        self.cache.load_state_dict(state["cache"])
        self.resubmit = [_Pending.from_dict(p) for p in state["in_flight"]]

    def checkpoint(self) -> None:
        self._checkpointed = time.monotonic()
        atomic_write_json(self.output_dir / CHECKPOINT, self.state_dict())

    @classmethod
    def resume(cls, executor: Executor, output_dir: str | Path, state: dict | None = None, **kwargs: Any) -> "LayerSearch":
        """Continue the run checkpointed in ``output_dir`` (its config, seed and metadata);
        ``state``: its :func:`read_checkpoint`, if the caller read it already."""
        state = state if state is not None else read_checkpoint(output_dir)
        path = Path(output_dir) / CHECKPOINT
        config = config_from_dict(EvolutionConfig, state["config"], source=str(path))
        search = cls(config, executor, output_dir, state["seed"], metadata=state["metadata"], **kwargs)
        try:
            search.load_state_dict(state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            raise CorruptFileError(f"search checkpoint {str(path)!r} does not hold a search's state "
                                   f"({type(error).__name__}: {error}); it was not written by this program or is "
                                   "damaged; delete the run folder and start again") from None
        # drop lines written after the checkpoint (they are proposed again, identically)
        atomic_write_text(search.output_dir / LOG, "".join(_line(r) for r in search.records))
        return search

    # ----------------------------------------------------------------------- the loop
    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self._started if self._started is not None else 0.0)

    def run(self, stop: StopCondition) -> list[CandidateRecord]:
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
            self._record(pending, CandidateResult.reject(Stage.STATIC, reason), cache_hit=False)
            return
        cached = self.cache.lookup(pending.fingerprint)
        if cached is not None:
            self._record(pending, CandidateResult.from_dict(cached).with_timings({}), cache_hit=True)
            return
        self._submit(pending)

    def _submit(self, pending: _Pending) -> None:
        pending.started = time.monotonic()
        self.in_flight[pending.candidate_id] = pending
        self.executor.submit(pending.candidate_id, pending.genome.to_dict())

    def _finish(self, pending: _Pending, result: CandidateResult) -> None:
        if not isinstance(result, CandidateResult):
            raise TypeError(f"executors return CandidateResult, got {type(result).__name__}")
        if result.stage is None or not result.stage.transient:  # a crash may be transient: do not cache it
            self.cache.store(pending.fingerprint, result.with_timings({}).to_dict())
        if pending.origin.startswith("baseline:"):
            self._record_baseline(pending, result)
        else:
            self._record(pending, result, cache_hit=False)

    def _record_baseline(self, pending: _Pending, result: CandidateResult) -> None:
        name = pending.origin.split(":", 1)[1]
        record = self.baselines[name] = self._make_record(pending, result, cache_hit=False)
        self.todo_baselines.pop(name, None)
        if self.config.population_from_references and self._joins_population(record):
            self.proposer.add(member_from_record(record))
        self.checkpoint()
        if self.on_record is not None:
            self.on_record(self, record)

    def _joins_population(self, record: CandidateRecord) -> bool:
        if record.accepted:
            return True
        return self.config.admit_quality_rejected and record.stage is Stage.QUALITY and bool(record.accuracies)

    def _make_record(self, pending: _Pending, result: CandidateResult, cache_hit: bool) -> CandidateRecord:
        return CandidateRecord(
            pending.candidate_id, pending.genome.to_dict(), to_infix(pending.genome), pending.origin, pending.parent,
            pending.fingerprint, result, cache_hit, round(time.monotonic() - pending.started, 3), round(self.elapsed(), 3),
        )

    def _record(self, pending: _Pending, result: CandidateResult, cache_hit: bool) -> None:
        record = self._make_record(pending, result, cache_hit)
        self.records.append(record)
        if self._joins_population(record):
            self.proposer.add(member_from_record(record))
        append_jsonl(self.output_dir / LOG, record.to_dict())
        if record.trained or time.monotonic() - self._checkpointed > CHECKPOINT_INTERVAL:
            self.checkpoint()
        if self.on_record is not None:
            self.on_record(self, record)


def _line(record: CandidateRecord) -> str:
    return json.dumps(record.to_dict()) + "\n"
