"""A progress line for a running search: counts, rejections by stage, cache hits, best
accuracies, rate and ETA; printed for every accepted candidate and otherwise at most every
few seconds (most candidates are rejected in milliseconds)."""
from __future__ import annotations

import time
from collections import Counter

from evonorm_core.search.driver import LayerSearch, StopCondition


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressPrinter:
    """``on_record`` callback of :class:`LayerSearch` printing a status line."""

    def __init__(self, stop: StopCondition, interval: float = 5.0) -> None:
        self.stop, self.interval = stop, interval
        self.rejected: Counter[str] = Counter()
        self.accepted = 0
        self.best: dict | None = None
        self.counted = 0
        self.printed = float("-inf")

    def eta(self, done: int, elapsed: float) -> str:
        remaining = []
        if self.stop.time_budget is not None:
            remaining.append(self.stop.time_budget - elapsed)
        if self.stop.max_candidates is not None and done:
            remaining.append((self.stop.max_candidates - done) * elapsed / done)
        return _duration(min(remaining)) if remaining else "until stopped"

    def count(self, records: list[dict]) -> None:
        """Fold in the records not counted yet (all of them after ``--resume``)."""
        for record in records[self.counted:]:
            if record["status"] == "accepted":
                self.accepted += 1
                if self.best is None or sum(record["accuracies"].values()) > sum(self.best["accuracies"].values()):
                    self.best = record
            else:
                self.rejected[record["stage"]] += 1
        self.counted = len(records)

    def __call__(self, search: LayerSearch, record: dict) -> None:
        if record["origin"].startswith("baseline:"):
            accs = ", ".join(f"{a} {v:.3f}" for a, v in record["accuracies"].items())
            print(f"baseline {record['origin'].split(':', 1)[1]}: {record['status']} {record['stage'] or ''} {accs}", flush=True)
            return
        self.count(search.records)
        if record["status"] != "accepted" and time.monotonic() - self.printed < self.interval:
            return
        self.printed = time.monotonic()
        done, elapsed = len(search.records), search.elapsed()
        best = " ".join(f"{v:.3f}" for v in self.best["accuracies"].values()) if self.best else "-"
        rejected = " ".join(f"{k} {v}" for k, v in sorted(self.rejected.items())) or "0"
        print(
            f"[{done} candidates | accepted {self.accepted} | rejected {rejected} | cache hits {search.cache.hits} | "
            f"best {best} | {elapsed / done:.2f} s/cand | {_duration(elapsed)} elapsed | ETA {self.eta(done, elapsed)}]"
            f" #{record['id']} {record['status']}{' (' + record['stage'] + ')' if record['stage'] else ''}",
            flush=True,
        )
