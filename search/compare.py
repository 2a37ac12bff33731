"""Evolution vs random search at an equal candidate budget, over seeds (the paper's Fig. 10):
``python search/compare.py --output-dir runs/fig10 --max-candidates N --seeds 0 1 2``.

Runs ``search/evolve.py`` once per strategy and seed into ``OUTPUT/<strategy>_seed<seed>`` with the
same settings, both from random graphs as in the paper (``--no-population-from-references``; any
further flags are passed to every run and win, e.g. ``--mode S``), each stopping after
``--max-candidates`` proposed candidates (no time budget), ``--jobs`` at a time, each run's output
in ``OUTPUT/<strategy>_seed<seed>.log``. A run that is already complete is reused, one that was
interrupted is resumed, so the same command continues after a kill (flags that may change on
``--resume``, such as ``--workers``, apply to it); a folder holding a search of other settings
(strategy, seed, mode, proxy...) is refused; a run that fails is named at the end (no summary is
written then) and the others go on. Then writes ``--json`` (default OUTPUT/fig10.json): per strategy
the seeds, the mean accuracy of the top-10 distinct accepted layers at the end of each seed's run
(of all of them while fewer than 10 exist, so read it beside the count), how many distinct layers
each seed accepted, its best layer's mean accuracy, the curve ``[candidates, top-10 mean]`` of each
seed, BN-ReLU's (GN-ReLU's for mode S) mean accuracy on the same proxy per seed, and the proxy the
runs trained on (``proxies``: each distinct description once); and ``--plot``: mean +- std over
seeds of the top-10 curves, one band per strategy, the reference dashed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from evonorm_core.experiment.arguments import DistinctValues, output_file
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.config import ConfigError, command_line, option_values, resume_config
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json
from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import RunDirError, holds_run
from evonorm_core.experiment.tables import mean_and_std, mean_std_fields, pyplot, save_figure
from evonorm_core.search.driver import CHECKPOINT, read_checkpoint
from evonorm_suite.search import evolve
from evonorm_suite.search.config import read_run_config
from evonorm_suite.search.report import distinct_accepted, summarize

STRATEGIES = ("evolution", "random")


def run_folder(output_dir: Path, strategy: str, seed: int) -> Path:
    return output_dir / f"{strategy}_seed{seed}"


def is_complete(folder: Path, budget: int) -> bool:
    """Whether the search in ``folder`` has evaluated its first ``budget`` candidates (and its references)."""
    if not (folder / CHECKPOINT).is_file():
        return False
    state = read_checkpoint(folder)
    return state["next_id"] >= budget and not state["in_flight"] and not state["todo_baselines"]


def fresh_argv(folder: Path, strategy: str, seed: int, budget: int, extra: list[str]) -> list[str]:
    """search/evolve.py's flags for the cell's search started in ``folder``."""
    # Fig. 10 compares searches from random graphs; a flag given in ``extra`` still wins
    return ["--no-population-from-references", *extra, "--strategy", strategy, "--seed", str(seed),
            "--max-candidates", str(budget), "--time-budget", "none", "--output-dir", str(folder)]


def check_started_run(folder: Path, strategy: str, seed: int, budget: int, extra: list[str]) -> None:
    """Raise :class:`ConfigError` naming ``folder`` and the options if the search started there differs from
    the one these flags would start in a setting that a resume cannot change (its strategy, seed, mode, proxy...):
    a finished cell would be reused, an unfinished one continued, as if it were this comparison's."""
    wanted = evolve.resolve_config(evolve.build_parser().parse_args(fresh_argv(folder, strategy, seed, budget, extra)))
    try:
        resume_config(read_run_config(folder), option_values(wanted))
    except ConfigError as error:
        raise ConfigError(f"{folder} holds a search of other settings than this comparison's ({error}); give another "
                          "--output-dir or the flags it was started with") from None


def run_cell(output_dir: Path, strategy: str, seed: int, budget: int, extra: list[str]) -> Cell:
    """The grid cell of one search of ``budget`` candidates: started fresh, or resumed with the same flags (a resume
    keeps the run's settings and refuses a change; those that may change on ``--resume``, e.g. ``--workers``, apply)."""
    folder = run_folder(output_dir, strategy, seed)
    argv = fresh_argv(folder, strategy, seed, budget, extra)
    if holds_run(folder):
        argv.append("--resume")
    return Cell(folder.name, done=lambda: is_complete(folder, budget),
                commands=((sys.executable, "-m", "evonorm_suite.search.evolve", *argv),))


def value_at(curve: list[list[float]], candidates: int) -> float | None:
    """The top-10 mean after ``candidates`` candidates (None before any layer was accepted)."""
    before = [mean for x, mean in curve if x <= candidates]
    return before[-1] if before else None


def collect(output_dir: Path, seeds: list[int], budget: int) -> dict:
    strategies: dict = {}
    reference: dict[str, list] = {}
    proxies: dict[str, None] = {}  # the runs' proxy descriptions, in order, each once
    cpu_seconds = 0.0
    for strategy in STRATEGIES:
        finals, curves, distinct, best = [], {}, [], []
        for seed in seeds:
            summary = summarize(str(run_folder(output_dir, strategy, seed)))
            cpu_seconds += summary["cpu_seconds"]
            proxies[summary["proxy"] or "not recorded"] = None
            curves[str(seed)] = summary["curve"]
            finals.append(value_at(summary["curve"], budget))
            # the first `budget` candidates, as value_at: a reused longer run is not counted past the budget
            layers = distinct_accepted(read_checkpoint(run_folder(output_dir, strategy, seed))["records"][:budget])
            distinct.append(len(layers))
            best.append(max((round(r.mean_accuracy, 4) for r in layers), default=None))
            for name in ("bn_relu", "gn_relu"):
                layer = summary["references"].get(name)
                if layer is not None and strategy == "evolution":
                    reference.setdefault(name, []).append(layer["mean_accuracy"])
        known = [v for v in finals if v is not None]
        strategies[strategy] = {
            "seeds": seeds, "top10_final": finals, "distinct_accepted": distinct, "best_final": best,
            "curves": curves,
            **mean_std_fields(known, 4),
        }
    evo, rnd = strategies["evolution"], strategies["random"]
    verdict = None
    if evo["mean"] is not None and rnd["mean"] is not None:
        gap = evo["mean"] - rnd["mean"]
        spread = max(evo["std"] or 0.0, rnd["std"] or 0.0)
        verdict = {"evolution_minus_random": round(gap, 4), "largest_std": round(spread, 4),
                   "evolution_beats_random_by_more_than_the_spread": gap > spread}
    return {"candidate_budget": budget, "proxies": list(proxies), "cpu_seconds": round(cpu_seconds, 1), "seeds": seeds,
            "strategies": strategies, "verdict": verdict,
            **{f"{name}_reference": values for name, values in reference.items()}}


def plot(result: dict, path: str | Path) -> Path:
    plt = pyplot()
    budget = result["candidate_budget"]
    xs = list(range(1, budget + 1, max(1, budget // 200))) + [budget]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for strategy, data in result["strategies"].items():
        per_seed = [[value_at(curve, x) for x in xs] for curve in data["curves"].values()]
        points = [(x, [v for v in column if v is not None]) for x, column in zip(xs, zip(*per_seed))]
        points = [(x, vs) for x, vs in points if len(vs) == len(per_seed)]  # every seed has accepted a layer
        if not points:
            continue
        means, stds = zip(*(mean_and_std(vs) for _, vs in points))
        stds = [s or 0.0 for s in stds]
        line, = ax.plot([x for x, _ in points], means, label=f"{strategy} ({len(per_seed)} seeds)")
        ax.fill_between([x for x, _ in points], [m - s for m, s in zip(means, stds)],
                        [m + s for m, s in zip(means, stds)], color=line.get_color(), alpha=0.2)
    for key in ("bn_relu_reference", "gn_relu_reference"):
        if result.get(key):
            ax.axhline(statistics.fmean(result[key]), color="black", linestyle="--", linewidth=1,
                       label=key.split("_reference")[0].replace("_", "-").upper().replace("RELU", "ReLU"))
    ax.set_xlabel("candidates proposed")
    ax.set_ylabel("mean accuracy across anchors, top 10")
    ax.set_title("evolution vs random search (mean +- std over seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python search/compare.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)  # flags it does not know go to every run: --seed is not --seeds
    parser.add_argument("--output-dir", default="runs/fig10", help="one folder per run is made in here")
    parser.add_argument("--max-candidates", type=int, required=True, help="candidate budget of every run")
    parser.add_argument("--seeds", type=seed_value, nargs="+", action=DistinctValues, default=[0, 1, 2], help="search seeds (default: 0 1 2)")
    parser.add_argument("--json", type=output_file, help="summary to write (default: OUTPUT/fig10.json)")
    parser.add_argument("--plot", type=output_file, help="PNG to write (default: OUTPUT/fig10.png)")
    parser.add_argument("--jobs", type=int, default=1, help="searches run at once, each with its own --workers "
                        "(default %(default)s)")
    args, extra = parser.parse_known_args(argv)
    for flag, value in (("--max-candidates", args.max_candidates), ("--jobs", args.jobs)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    for flag in ("--strategy", "--seed", "--output-dir", "--resume", "--time-budget"):
        if any(item == flag or item.startswith(flag + "=") for item in extra):
            parser.error(f"{flag} is set by this program for each run; remove it")
    runs_parser = evolve.build_parser()
    runs_parser.prog = "python search/compare.py (a flag for every search/evolve.py run)"
    try:  # a bad flag or value for the runs is an error now, not in every run
        evolve.resolve_config(runs_parser.parse_args(extra))
    except ConfigError as error:
        parser.error(str(error))
    output_dir = Path(args.output_dir)
    started = time.monotonic()
    try:
        for seed in args.seeds:
            for strategy in STRATEGIES:
                if holds_run(folder := run_folder(output_dir, strategy, seed)):
                    check_started_run(folder, strategy, seed, args.max_candidates, extra)
    except (ConfigError, CorruptFileError) as error:
        parser.error(str(error))
    cells = [run_cell(output_dir, strategy, seed, args.max_candidates, extra)
             for seed in args.seeds for strategy in STRATEGIES]
    try:
        status = run_grid(cells, output_dir, jobs=args.jobs, name="fig10").exit_status
    except (CorruptFileError, RunDirError) as error:  # a damaged checkpoint of an earlier run, a folder in use
        parser.error(str(error))
    if status:
        return status
    try:
        result = collect(output_dir, args.seeds, args.max_candidates)
    except (CorruptFileError, ConfigError) as error:  # a run file damaged since its search finished
        parser.error(str(error))
    result["command"] = command_line("python search/compare.py", argv)
    result["wall_seconds_this_session"] = round(time.monotonic() - started, 1)
    json_path = Path(args.json or output_dir / "fig10.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(json_path, result)
    png = plot(result, args.plot or output_dir / "fig10.png")
    for strategy, data in result["strategies"].items():
        finals = ", ".join("-" if v is None else f"{v:.3f}" for v in data["top10_final"])
        print(f"{strategy}: top-10 mean accuracy after {args.max_candidates} candidates per seed: {finals}; "
              f"mean {data['mean']} std {data['std']}; distinct layers accepted {data['distinct_accepted']}")
    print(f"verdict: {result['verdict']}\nsummary: {json_path}\nplot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
