"""Progress of a running search: a status line (counts, rejections by stage, cache hits, best
and top-10 mean accuracy, trained candidates per minute, ETA) printed for every accepted
candidate and otherwise at most every few seconds (most candidates are rejected in
milliseconds), and a line each time the Pareto frontier of accepted layers gains a member,
with its formula."""
from __future__ import annotations

import statistics
import time
from collections import Counter

from evonorm_core.experiment.progress import format_duration
from evonorm_core.search.driver import LayerSearch, StopCondition, member_from_record
from evonorm_core.search.equivalence import DistinctLayers
from evonorm_core.search.evolution import Member, pareto_frontier
from evonorm_core.search.results import CandidateRecord


class ProgressPrinter:
    """``on_record`` callback of :class:`LayerSearch` printing status lines."""

    def __init__(self, stop: StopCondition, interval: float = 5.0, k: int = 10) -> None:
        self.stop, self.interval, self.k = stop, interval, k
        self.rejected: Counter[str] = Counter()
        self.accepted = self.trained = 0
        self.layers = DistinctLayers()  # every distinct accepted layer, represented by its first candidate
        self.top: dict[int, float] = {}  # candidate id -> mean accuracy of the k best distinct layers
        self.frontier: list[Member] = []
        self.counted = 0
        self.printed = float("-inf")

    def eta(self, done: int, elapsed: float) -> str:
        remaining = []
        if self.stop.time_budget is not None:
            remaining.append(self.stop.time_budget - elapsed)
        if self.stop.max_candidates is not None and done:
            remaining.append((self.stop.max_candidates - done) * elapsed / done)
        return format_duration(min(remaining)) if remaining else "until stopped"

    def count(self, records: list[CandidateRecord]) -> list[CandidateRecord]:
        """Fold in the records not counted yet (all of them after ``--resume``); returns the
        new ones that joined the Pareto frontier."""
        joined = []
        for record in records[self.counted:]:
            self.trained += record.trained
            if not record.accepted:
                self.rejected[str(record.stage)] += 1
                continue
            self.accepted += 1
            member = member_from_record(record)
            if not self.layers.add(record.candidate_id, member.response):
                continue
            self.top[record.candidate_id] = record.mean_accuracy
            self.top = dict(sorted(self.top.items(), key=lambda kv: -kv[1])[:self.k])
            self.frontier = pareto_frontier([*self.frontier, member])
            if any(m is member for m in self.frontier):
                joined.append(record)
        self.counted = len(records)
        return joined

    def status(self, search: LayerSearch) -> str:
        done, elapsed = len(search.records), search.elapsed()
        best = f"{max(self.top.values()):.3f}" if self.top else "-"
        top = f"{statistics.fmean(self.top.values()):.3f} ({len(self.top)})" if self.top else "-"
        rejected = " ".join(f"{k} {v}" for k, v in sorted(self.rejected.items())) or "0"
        rate = self.trained / max(elapsed, 1e-9) * 60
        return (f"[{done} candidates | accepted {self.accepted} | rejected {rejected} | cache hits {search.cache.hits} "
                f"| best mean {best} | top-{self.k} mean {top} | frontier {len(self.frontier)} | {rate:.1f} trained/min "
                f"| {format_duration(elapsed)} elapsed | ETA {self.eta(done, elapsed)}]")

    def __call__(self, search: LayerSearch, record: CandidateRecord) -> None:
        if record.origin.startswith("baseline:"):
            accs = " / ".join(f"{v:.3f}" for v in record.accuracies.values())
            stage = "" if record.accepted else f" ({record.stage}: {record.reason})"
            print(f"reference {record.origin.split(':', 1)[1]}: {record.status}{stage} {accs}  {record.expression}",
                  flush=True)
            return
        for joined in self.count(search.records):
            accs = " / ".join(f"{v:.3f}" for v in joined.accuracies.values())
            print(f"  frontier + #{joined.candidate_id} ({joined.origin}) {accs} mean {joined.mean_accuracy:.3f}: "
                  f"{joined.expression}", flush=True)
        if not record.accepted and time.monotonic() - self.printed < self.interval:
            return
        self.printed = time.monotonic()
        print(self.status(search) + f" #{record.candidate_id} {record.status}"
              f"{' (' + str(record.stage) + ')' if record.stage else ''}", flush=True)
