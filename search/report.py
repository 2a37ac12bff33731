"""Summarize layer-search runs: ``python search/report.py DIR [DIR ...]``.

Prints, per run, the counts (candidates, accepted, rejected per stage, cache hits,
seconds per candidate), the reference layers measured on the same proxy, the Pareto
frontier and the top 10 by mean accuracy across anchors; writes a PNG of search progress
(mean +- std of the top-10's mean accuracy vs candidates evaluated, as the paper's
Fig. 10), all runs on one plot (e.g. evolution vs random).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

from evonorm_core.search.driver import member_from_record, read_checkpoint
from evonorm_core.search.evolution import pareto_frontier


def mean_accuracy(record: dict) -> float:
    values = list(record["accuracies"].values())
    return sum(values) / len(values)


def accepted(records: list[dict]) -> list[dict]:
    return [r for r in records if r["status"] == "accepted"]


def distinct_accepted(records: list[dict]) -> list[dict]:
    """The accepted records, only the first of each function (equivalence-cache fingerprint)."""
    first: dict[str, dict] = {}
    for record in accepted(records):
        first.setdefault(record["fingerprint"], record)
    return list(first.values())


def top_k(records: list[dict], k: int = 10) -> list[dict]:
    """The ``k`` distinct accepted layers with the best mean accuracy (ties: the earlier first)."""
    return sorted(distinct_accepted(records), key=lambda r: (-mean_accuracy(r), r["id"]))[:k]


def frontier(records: list[dict]) -> list[dict]:
    """Distinct accepted layers on the Pareto frontier of the per-anchor accuracies."""
    by_id = {r["id"]: r for r in distinct_accepted(records)}
    members = [member_from_record(r) for r in by_id.values()]
    return sorted((by_id[m.candidate_id] for m in pareto_frontier(members)), key=lambda r: -mean_accuracy(r))


def counts(state: dict) -> dict:
    records = state["records"]
    stages = Counter(r["stage"] for r in records if r["status"] == "rejected")
    elapsed = state["elapsed"]
    return {
        "candidates": len(records), "accepted": len(accepted(records)), "rejected": dict(sorted(stages.items())),
        "cache_hits": sum(r["cache_hit"] for r in records), "elapsed_s": round(elapsed, 1),
        "seconds_per_candidate": round(elapsed / max(1, len(records)), 2),
    }


def top_k_curve(records: list[dict], k: int = 10) -> tuple[list[int], list[float], list[float]]:
    """After each evaluated candidate: (count, mean, std) of the mean accuracy of the top-``k``
    distinct layers so far (a repeat of a function already seen does not count twice)."""
    xs, means, stds, best, seen = [], [], [], [], set()
    for i, record in enumerate(records, 1):
        if record["status"] == "accepted" and record["fingerprint"] not in seen:
            seen.add(record["fingerprint"])
            best = sorted(best + [mean_accuracy(record)], reverse=True)[:k]
        if best:
            xs.append(i)
            means.append(statistics.fmean(best))
            stds.append(statistics.pstdev(best) if len(best) > 1 else 0.0)
    return xs, means, stds


def _row(name: str, record: dict, anchors: list[str]) -> str:
    accs = "  ".join(f"{record['accuracies'].get(a, float('nan')):.3f}" for a in anchors)
    mean = f"{mean_accuracy(record):.3f}" if record["accuracies"] else "  -  "
    status = "" if record["status"] == "accepted" else f"  [rejected: {record['stage']}: {record['reason']}]"
    return f"  {name:<12} {accs}  {mean}  {record['expression']}{status}"


def format_report(output_dir: str, k: int = 10) -> str:
    state = read_checkpoint(output_dir)
    records, anchors = state["records"], list(state["metadata"]["proxy"]["anchors"])
    c = counts(state)
    lines = [
        f"== {output_dir}: mode {state['config']['mode']}, {state['config']['strategy']}, "
        f"preset {state['metadata'].get('preset', '?')}, seed {state['seed']}",
        f"candidates {c['candidates']}, accepted {c['accepted']}, rejected by stage {c['rejected']}, "
        f"cache hits {c['cache_hits']}, {c['elapsed_s']} s ({c['seconds_per_candidate']} s/candidate)",
        f"  {'layer':<12} {'  '.join(a[:5] for a in anchors)}  mean   expression",
    ]
    lines += [_row(name, record, anchors) for name, record in sorted(state["baselines"].items())]
    lines.append("Pareto frontier:")
    lines += [_row(f"#{r['id']}", r, anchors) for r in frontier(records)] or ["  (no accepted candidate)"]
    lines.append(f"top {k} by mean accuracy:")
    lines += [_row(f"#{r['id']}", r, anchors) for r in top_k(records, k)] or ["  (no accepted candidate)"]
    return "\n".join(lines)


def print_report(output_dirs: list[str], k: int = 10) -> None:
    for output_dir in output_dirs:
        print(format_report(output_dir, k), flush=True)


def write_progress_plot(output_dirs: list[str], path: str | Path, k: int = 10) -> Path:
    """One curve (mean +- std of the top-``k``) per run; the BN-ReLU baseline dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for output_dir in output_dirs:
        state = read_checkpoint(output_dir)
        xs, means, stds = top_k_curve(state["records"], k)
        label = f"{state['config']['strategy']} ({Path(output_dir).name}, {len(state['records'])} candidates)"
        if not xs:
            label += ": none accepted"
        line, = ax.plot(xs, means, label=label)
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                        color=line.get_color(), alpha=0.2)
        baseline = state["baselines"].get("bn_relu")
        if baseline and baseline["status"] == "accepted":
            ax.axhline(mean_accuracy(baseline), color=line.get_color(), linestyle="--", linewidth=1,
                       label=f"BN-ReLU ({Path(output_dir).name})")
    ax.set_xlabel("candidates evaluated")
    ax.set_ylabel(f"mean accuracy across anchors, top {k}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dirs", nargs="+", metavar="DIR", help="output directories of search/evolve.py runs")
    parser.add_argument("--top", type=int, default=10, help="how many candidates the top list and the curve use")
    parser.add_argument("--plot", help="PNG to write (default: DIR/progress.png of the first DIR)")
    args = parser.parse_args(argv)
    try:
        print_report(args.output_dirs, args.top)
        plot = write_progress_plot(args.output_dirs, args.plot or Path(args.output_dirs[0]) / "progress.png", args.top)
    except FileNotFoundError as error:
        parser.error(str(error))
    print(f"search progress plot: {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
