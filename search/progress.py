"""One progress line per finished candidate: counts, rejections by stage, cache hits,
best accuracies, rate and ETA."""
from __future__ import annotations

import time
from collections import Counter

from evonorm_core.search.driver import LayerSearch, StopCondition


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressPrinter:
    """``on_record`` callback of :class:`LayerSearch` printing a status line."""

    def __init__(self, stop: StopCondition) -> None:
        self.stop = stop
        self.started = time.monotonic()

    def eta(self, search: LayerSearch, done: int, elapsed: float) -> str:
        remaining = []
        if self.stop.time_budget is not None:
            remaining.append(self.stop.time_budget - elapsed)
        if self.stop.max_candidates is not None and done:
            remaining.append((self.stop.max_candidates - done) * elapsed / done)
        return _duration(min(remaining)) if remaining else "until stopped"

    def __call__(self, search: LayerSearch, record: dict) -> None:
        if record["origin"].startswith("baseline:"):
            accs = ", ".join(f"{a} {v:.3f}" for a, v in record["accuracies"].items())
            print(f"baseline {record['origin'].split(':', 1)[1]}: {record['status']} {record['stage'] or ''} {accs}", flush=True)
            return
        records = search.records
        done, elapsed = len(records), search.elapsed()
        rejected = Counter(r["stage"] for r in records if r["status"] == "rejected")
        accepted = [r for r in records if r["status"] == "accepted"]
        best = max(accepted, key=lambda r: sum(r["accuracies"].values()), default=None)
        best_text = " ".join(f"{v:.3f}" for v in best["accuracies"].values()) if best else "-"
        print(
            f"[{done} candidates | accepted {len(accepted)} | rejected "
            f"{' '.join(f'{k} {v}' for k, v in sorted(rejected.items())) or '0'} | cache hits {search.cache.hits} | "
            f"best {best_text} | {elapsed / done:.1f} s/cand | {_duration(elapsed)} elapsed | ETA {self.eta(search, done, elapsed)}]"
            f" #{record['id']} {record['status']}{' (' + record['stage'] + ')' if record['stage'] else ''}",
            flush=True,
        )
