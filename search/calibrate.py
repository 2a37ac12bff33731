"""Measure the proxy task: ``python search/calibrate.py --json FILE [settings]``.

What the search's presets are chosen by. For the reference layers of the mode (and
``--random`` random layers that pass the static checks, drawn with a fixed seed), on each
seed: the full proxy evaluation (quality, stability, fitness, exactly as the search runs
it) with its per-stage timings and CPU seconds, and, with ``--curve``, the reference layers'
validation accuracy on each anchor after each of the given step counts (one training per
anchor, evaluated along the way). The JSON (rewritten after every layer) holds the command,
the configuration, every result and a summary: per reference layer the mean and spread
over seeds, how many seeds accepted it, the random layers' acceptance rate, and the CPU
seconds per evaluated candidate.

Settings are those of ``search/evolve.py`` (the same flags), starting from ``--preset``.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import torch

from evonorm_core.experiment.config import ConfigError, add_config_arguments, command_line, config_to_dict, \
    explicit_values, replace_config
from evonorm_core.experiment.files import atomic_write_json
from evonorm_core.search.expression import to_infix
from evonorm_core.search.genome import Genome, random_genome
from evonorm_core.search.rejection import static_rejection
from evonorm_suite.search.config import SearchConfig
from evonorm_suite.search.presets import DEFAULT_PRESET, PRESETS, preset
from evonorm_suite.search.proxy import ProxyEvaluator, _AnchorTraining


def random_layers(count: int, mode: str, max_nodes: int, seed: int = 1234) -> dict[str, Genome]:
    """``count`` random genomes (the search's generator) that pass the static checks."""
    rng, layers = random.Random(seed), {}
    while len(layers) < count:
        genome = random_genome(rng, mode, max_nodes)
        if static_rejection(genome) is None:
            layers[f"random{len(layers)}"] = genome
    return layers


def learning_curve(evaluator: ProxyEvaluator, genome: Genome, steps: list[int]) -> dict[str, list]:
    """anchor -> validation accuracy after each of ``steps`` (None after a non-finite loss)."""
    curves = {}
    for anchor in evaluator.config.anchors:
        run = _AnchorTraining(evaluator.build(anchor, genome), evaluator.config, evaluator.data(), evaluator.seed)
        values: list[float | None] = []
        for step in steps:
            values.append(run.accuracy() if run.train_to(step) else None)
            if values[-1] is None:
                values += [None] * (len(steps) - len(values))
                break
        curves[anchor] = values
    return curves


def summarize(rows: list[dict], references: list[str]) -> dict:
    summary: dict = {"references": {}, "random": {}}
    for name in references:
        runs = [r for r in rows if r["layer"] == name]
        means = [r["mean_accuracy"] for r in runs if r["status"] == "accepted"]
        summary["references"][name] = {
            "accepted_seeds": len(means), "seeds": len(runs),
            "mean_accuracy": round(statistics.fmean(means), 4) if means else None,
            "spread": round(max(means) - min(means), 4) if means else None,
            "min_anchor_accuracy": min((min(r["accuracies"].values()) for r in runs if r["status"] == "accepted"),
                                       default=None),
            "rejections": [f"seed {r['seed']}: {r['stage']}: {r['reason']}" for r in runs if r["status"] != "accepted"],
        }
    random_runs = [r for r in rows if r["layer"] not in references]
    if random_runs:
        stages: dict[str, int] = {}
        for r in random_runs:
            stages[r["stage"] or "accepted"] = stages.get(r["stage"] or "accepted", 0) + 1
        summary["random"] = {"evaluated": len(random_runs), "outcomes": stages,
                             "accepted_fraction": round(stages.get("accepted", 0) / len(random_runs), 3)}
    summary["cpu_seconds_per_candidate"] = {
        kind: round(statistics.fmean(r["cpu_seconds"] for r in rows if (r["layer"] in references) == is_ref), 2)
        for kind, is_ref in (("references", True), ("random", False))
        if any((r["layer"] in references) == is_ref for r in rows)
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", dest="preset_name", choices=sorted(PRESETS), default=DEFAULT_PRESET,
                        help="starting values of the settings (default: cpu)")
    parser.add_argument("--json", required=True, help="where to write the measurements")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    parser.add_argument("--random", type=int, default=0, help="random layers to evaluate besides the references")
    parser.add_argument("--curve", type=int, nargs="*", help="also record learning curves at these step counts")
    settings = parser.add_argument_group("settings", "as search/evolve.py")
    add_config_arguments(settings, SearchConfig, defaults=preset(DEFAULT_PRESET, "B"))
    args = parser.parse_args(argv)
    if args.random < 0 or any(s < 0 for s in args.seeds) or any(s < 1 for s in args.curve or []):
        parser.error("--random and --seeds must be >= 0, --curve steps >= 1")
    explicit = explicit_values(args, SearchConfig)
    try:
        config = replace_config(preset(args.preset_name, explicit.get("evolution.mode", "B")), explicit)
    except (ConfigError, ValueError) as error:
        parser.error(str(error))
    layers = {**config.reference_genomes(),
              **random_layers(args.random, config.evolution.mode, config.evolution.max_nodes)}
    references = list(config.reference_genomes())
    rows: list[dict] = []
    started = time.monotonic()
    for seed in args.seeds:
        evaluator = ProxyEvaluator(config.proxy, seed=seed, threads=config.torch_threads)
        for name, genome in layers.items():
            cpu = time.process_time()
            result = evaluator(genome.to_dict())
            row = {"layer": name, "expression": to_infix(genome), "seed": seed, **result.to_dict(),
                   "mean_accuracy": round(result.mean_accuracy, 4) if result.accuracies else None,
                   "cpu_seconds": round(time.process_time() - cpu, 2)}
            if args.curve and name in references:
                row["curve_steps"] = sorted(args.curve)
                row["curves"] = learning_curve(evaluator, genome, sorted(args.curve))
            rows.append(row)
            accs = " / ".join(f"{v:.3f}" for v in result.accuracies.values())
            print(f"seed {seed} {name:<11} {result.status:<8} {str(result.stage or ''):<9} {accs:<21} "
                  f"{row['cpu_seconds']:6.1f} CPU s  {result.reason}", flush=True)
            write(args.json, argv, config, args.seeds, started, rows, references)  # a partial file after a kill
    print(f"measurements: {args.json}")
    return 0


def write(path: str, argv: list[str] | None, config: SearchConfig, seeds: list[int], started: float, rows: list[dict],
          references: list[str]) -> None:
    atomic_write_json(path, {
        "command": command_line("python search/calibrate.py", argv),
        "config": config_to_dict(config), "seeds": seeds, "threads": torch.get_num_threads(),
        "wall_seconds": round(time.monotonic() - started, 1), "cpu_seconds": round(time.process_time(), 1),
        "summary": summarize(rows, references), "results": rows,
    })


if __name__ == "__main__":
    sys.exit(main())
