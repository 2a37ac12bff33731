"""Summarize layer-search runs: ``python search/report.py DIR [DIR ...]``.

Prints, per run, the counts (candidates, accepted, rejected per stage, cache hits, trained
candidates per CPU-minute, where the proxy's time went), the reference layers measured on
the same proxy, the Pareto frontier and the top 10 by mean accuracy across anchors, as
formulas; writes a PNG of search progress (mean +- std of the top-10's mean accuracy vs
candidates evaluated, as the paper's Fig. 10), all runs on one plot (e.g. evolution vs
random), and with ``--json`` a machine-readable summary.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

from torch import Tensor

from evonorm_core.experiment.arguments import output_file
from evonorm_core.experiment.config import ConfigError, command_line
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json, read_json
from evonorm_core.experiment.progress import format_duration
from evonorm_core.experiment.tables import pyplot, save_figure
from evonorm_core.search.driver import member_from_record, read_checkpoint
from evonorm_core.search.equivalence import DistinctLayers, initial_response
from evonorm_core.search.evolution import pareto_frontier
from evonorm_core.search.genome import Genome
from evonorm_core.search.results import CandidateRecord
from evonorm_suite.search.config import CONFIG_FILE, SearchConfig, read_run_config

SUMMARY_FILE = "summary.json"


def accepted(records: list[CandidateRecord]) -> list[CandidateRecord]:
    return [r for r in records if r.accepted]


def layer_response(record: CandidateRecord) -> Tensor:
    """The record's layer as :func:`~evonorm_core.search.equivalence.same_layer` compares it."""
    return initial_response(Genome.from_dict(record.genome))


def distinct_accepted(records: list[CandidateRecord]) -> list[CandidateRecord]:
    """The accepted records, only the first of each layer (:func:`~evonorm_core.search.equivalence.same_layer`:
    the same function at initialization within a stated tolerance, constants folded)."""
    layers, first = DistinctLayers(), []
    for record in accepted(records):
        if layers.add(record.candidate_id, layer_response(record)):
            first.append(record)
    return first


def top_k(records: list[CandidateRecord], k: int = 10, exclude: DistinctLayers | None = None) -> list[CandidateRecord]:
    """The ``k`` distinct accepted layers with the best mean accuracy (ties: the earlier first),
    leaving out the layers ``exclude`` holds (e.g. :func:`reference_layers`)."""
    found = [r for r in distinct_accepted(records) if exclude is None or exclude.match(layer_response(r)) is None]
    return sorted(found, key=lambda r: (-r.mean_accuracy, r.candidate_id))[:k]


def frontier(records: list[CandidateRecord]) -> list[CandidateRecord]:
    """Distinct accepted layers on the Pareto frontier of the per-anchor accuracies."""
    by_id = {r.candidate_id: r for r in distinct_accepted(records)}
    members = [member_from_record(r) for r in by_id.values()]
    return sorted((by_id[m.candidate_id] for m in pareto_frontier(members)), key=lambda r: -r.mean_accuracy)


def top_k_curve(records: list[CandidateRecord], k: int = 10) -> tuple[list[int], list[float], list[float]]:
    """After each evaluated candidate: (count, mean, std) of the mean accuracy of the top-``k``
    distinct layers so far (a repeat of a function already seen does not count twice)."""
    xs, means, stds, best, seen = [], [], [], [], DistinctLayers()
    for i, record in enumerate(records, 1):
        if record.accepted and seen.add(record.candidate_id, layer_response(record)):
            best = sorted(best + [record.mean_accuracy], reverse=True)[:k]
        if best:
            xs.append(i)
            means.append(statistics.fmean(best))
            stds.append(statistics.pstdev(best) if len(best) > 1 else 0.0)
    return xs, means, stds


def _kth_distinct(records: list[CandidateRecord], k: int) -> int | None:
    """The candidate count at which the ``k``-th distinct accepted layer appeared (None: never)."""
    seen = DistinctLayers()
    for i, record in enumerate(records, 1):
        if record.accepted and seen.add(record.candidate_id, layer_response(record)):
            if len(seen) == k:
                return i
    return None


def cores(config: SearchConfig | None) -> int:
    """CPU cores the run's workers use (workers x threads)."""
    return 1 if config is None else config.workers * config.torch_threads


def counts(state: dict, config: SearchConfig | None = None) -> dict:
    """Counts, rates and the proxy's time per stage of a run's checkpoint ``state``."""
    records = state["records"]
    stages = Counter(str(r.stage) for r in records if not r.accepted)
    elapsed = state["elapsed"]
    trained = [r for r in records if r.trained]
    cpu_minutes = elapsed * cores(config) / 60
    stage_seconds = Counter()
    for record in [*records, *state["baselines"].values()]:
        stage_seconds.update(record.result.timings)
    return {
        "candidates": len(records), "accepted": len(accepted(records)),
        "distinct_accepted": len(distinct_accepted(records)), "rejected": dict(sorted(stages.items())),
        "cache_hits": sum(r.cache_hit for r in records), "trained": len(trained), "elapsed_s": round(elapsed, 1),
        "cpu_seconds": round(elapsed * cores(config), 1),
        "seconds_per_candidate": round(elapsed / max(1, len(records)), 3),
        "trained_per_cpu_minute": round(len(trained) / cpu_minutes, 2) if cpu_minutes > 0 else None,
        "proxy_seconds_by_stage": {k: round(v, 1) for k, v in sorted(stage_seconds.items())},
    }


def reference_layers(state: dict) -> DistinctLayers:
    """The reference layers the run measured, keyed by name: a candidate that matches one
    (:meth:`DistinctLayers.match`) is that reference layer found again, not a new layer."""
    layers = DistinctLayers()
    for name, record in state["baselines"].items():
        layers.add(name, layer_response(record))
    return layers


def same_as(record: CandidateRecord, references: DistinctLayers | None) -> str | None:
    """The name of the reference layer ``record`` is, if any."""
    return None if references is None else references.match(layer_response(record))


def _row(name: str, record: CandidateRecord, anchors: list[str], references: DistinctLayers | None = None) -> str:
    accs = "  ".join(f"{record.accuracies[a]:.3f}" if a in record.accuracies else "  -  " for a in anchors)
    mean = f"{record.mean_accuracy:.3f}" if record.accuracies else "  -  "
    status = "" if record.accepted else f"  [rejected: {record.stage}: {record.reason}]"
    same = same_as(record, references)
    pointwise = "" if Genome.from_dict(record.genome).aggregates_input() else "  (pointwise: no statistic of x)"
    return f"  {name:<12} {accs}  {mean}  {record.expression}{status}" + (f"  (= {same})" if same else "") + pointwise


def _config_or_none(output_dir: str) -> SearchConfig | None:
    return read_run_config(output_dir) if (Path(output_dir) / CONFIG_FILE).is_file() else None


def _anchors(state: dict, config: SearchConfig | None) -> list[str]:
    if config is not None:
        return list(config.proxy.anchors)
    seen: dict[str, None] = {}
    for record in [*state["baselines"].values(), *state["records"]]:
        seen.update(dict.fromkeys(record.accuracies))
    return list(seen)


def format_report(output_dir: str, k: int = 10) -> str:
    state, config = read_checkpoint(output_dir), _config_or_none(output_dir)
    records, anchors = state["records"], _anchors(state, config)
    c = counts(state, config)
    evolution = state["config"]
    lines = [
        f"== {output_dir}: mode {evolution['mode']}, {evolution['strategy']}, "
        f"preset {config.preset if config else '?'}, seed {state['seed']}",
        f"candidates {c['candidates']}, accepted {c['accepted']} ({c['distinct_accepted']} distinct functions), "
        f"rejected by stage {c['rejected']}, cache hits {c['cache_hits']}",
        f"{format_duration(c['elapsed_s'])} on {cores(config)} core(s): {c['trained']} candidates trained, "
        f"{c['trained_per_cpu_minute']} trained per CPU-minute; proxy seconds by stage {c['proxy_seconds_by_stage']}",
        f"  {'layer':<12} {'  '.join(a[:5] for a in anchors)}  mean   expression",
        "reference layers (same proxy):",
    ]
    lines += [_row(name, record, anchors) for name, record in state["baselines"].items()] or ["  (none)"]
    lines.append("Pareto frontier:")
    known = reference_layers(state)
    lines += [_row(f"#{r.candidate_id}", r, anchors, known) for r in frontier(records)] or ["  (no accepted candidate)"]
    lines.append(f"top {k} by mean accuracy:")
    top = top_k(records, k)
    lines += [_row(f"#{r.candidate_id}", r, anchors, known) for r in top] or ["  (no accepted candidate)"]
    lines.append(f"pointwise layers (no statistic of x) among the best {min(5, len(top))}: {pointwise_count(top[:5])}")
    return "\n".join(lines)


def pointwise_count(records: list[CandidateRecord]) -> int:
    """How many of ``records`` are pointwise functions of ``x`` (bare activations)."""
    return sum(not Genome.from_dict(r.genome).aggregates_input() for r in records)


def print_report(output_dirs: list[str], k: int = 10) -> None:
    for output_dir in output_dirs:
        print(format_report(output_dir, k), flush=True)


def _layer(record: CandidateRecord) -> dict:
    return {"id": record.candidate_id, "expression": record.expression, "status": record.status,
            "stage": None if record.stage is None else str(record.stage), "reason": record.reason,
            "accuracies": record.accuracies,
            "mean_accuracy": round(record.mean_accuracy, 4) if record.accuracies else None}


def _found(record: CandidateRecord, references: DistinctLayers) -> dict:
    """A found layer as plain data; ``same_as``: the reference layer it is, if any; ``pointwise``: no
    statistic of ``x`` on a live path (:meth:`~evonorm_core.search.genome.Genome.aggregates_input`)."""
    return {**_layer(record), "same_as": same_as(record, references),
            "pointwise": not Genome.from_dict(record.genome).aggregates_input()}


def summarize(output_dir: str, k: int = 10) -> dict:
    """A run as plain data: its configuration, counts and rates, the reference layers, the top
    ``k``, the frontier and the top-``k`` curve ``[[candidates, mean], ...]``."""
    state, config = read_checkpoint(output_dir), _config_or_none(output_dir)
    records = state["records"]
    xs, means, _ = top_k_curve(records, k)
    top, known = top_k(records, k), reference_layers(state)
    argv = state["metadata"].get("argv")
    rerank = Path(output_dir) / "rerank.json"
    return {
        "command": None if argv is None else command_line("python search/evolve.py", argv),
        "output_dir": str(output_dir), "mode": state["config"]["mode"], "strategy": state["config"]["strategy"],
        "preset": config.preset if config else None, "proxy": config.proxy.describe() if config else None,
        "seed": state["seed"], "seeds": [state["seed"]],
        "cores": cores(config), **counts(state, config),
        "references": {name: _layer(r) for name, r in state["baselines"].items()},
        "top": [_found(r, known) for r in top], "frontier": [_found(r, known) for r in frontier(records)],
        f"top{k}_mean": round(statistics.fmean(r.mean_accuracy for r in top), 4) if top else None,
        "pointwise_in_top5": pointwise_count(top[:5]),
        "curve": [[x, round(m, 4)] for x, m in zip(xs, means)],
        "rerank": read_json(rerank, what="rerank result") if rerank.is_file() else None,
    }


def write_summary(output_dir: str, summary: dict) -> Path:
    path = Path(output_dir) / SUMMARY_FILE
    atomic_write_json(path, summary)
    return path


def write_progress_plot(output_dirs: list[str], path: str | Path, k: int = 10) -> Path:
    """One curve (mean +- std of the top-``k``) per run; the BN-ReLU reference dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for output_dir in output_dirs:
        state = read_checkpoint(output_dir)
        xs, means, stds = top_k_curve(state["records"], k)
        label = f"{state['config']['strategy']} ({Path(output_dir).name}, {len(state['records'])} candidates)"
        if not xs:
            label += ": none accepted"
        full = _kth_distinct(state["records"], k)
        # Until k distinct layers exist the "top k" is the mean of fewer: drawn dotted.
        split = next((i for i, x in enumerate(xs) if full is not None and x >= full), len(xs))
        line, = ax.plot(xs[:split + 1], means[:split + 1], linestyle=":")
        ax.plot(xs[split:], means[split:], color=line.get_color(), label=f"{label}, top {k}")
        ax.fill_between(xs[split:], [m - s for m, s in zip(means[split:], stds[split:])],
                        [m + s for m, s in zip(means[split:], stds[split:])], color=line.get_color(), alpha=0.2)
        best_xs, best, _ = top_k_curve(state["records"], 1)
        ax.plot(best_xs, best, color=line.get_color(), linewidth=0.8, alpha=0.6, label="best layer so far")
        for name in ("bn_relu", "gn_relu"):
            reference = state["baselines"].get(name)
            if reference is not None and reference.accepted:
                ax.axhline(reference.mean_accuracy, color=line.get_color(), linestyle="--", linewidth=1,
                           label=f"{name} ({Path(output_dir).name})")
    ax.set_xlabel("candidates evaluated")
    ax.set_ylabel("mean accuracy across anchors")
    ax.set_title(f"top-{k} distinct layers, mean +- std (dotted: fewer than {k} yet)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python search/report.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dirs", nargs="+", metavar="DIR", help="output folders of search/evolve.py runs")
    parser.add_argument("--top", type=int, default=10, help="how many candidates the top list and the curve use")
    parser.add_argument("--plot", type=output_file, help="PNG to write (default: DIR/progress.png of the first DIR)")
    parser.add_argument("--json", type=output_file, help="write the run's summary to this JSON file (a list of them for several DIRs)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be >= 1, got {args.top}")
    try:
        print_report(args.output_dirs, args.top)
        plot = write_progress_plot(args.output_dirs, args.plot or Path(args.output_dirs[0]) / "progress.png", args.top)
        if args.json:
            summaries = [summarize(d, args.top) for d in args.output_dirs]
            atomic_write_json(args.json, summaries[0] if len(summaries) == 1 else summaries)
    except (FileNotFoundError, CorruptFileError, ConfigError) as error:
        parser.error(str(error))
    print(f"search progress plot: {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
