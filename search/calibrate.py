"""Measure the proxy task: ``python search/calibrate.py --json FILE [settings]``.

What the search's presets are chosen by. On each seed, the reference layers of the mode, the
negative controls (bare activations without normalization, the paper's "Random + rej" layer
and its example of an unstable layer, :data:`~evonorm_suite.search.config.CONTROL_LAYERS`)
and ``--random`` random layers that pass the static checks (drawn with a fixed seed) go
through the full proxy evaluation (quality, stability, fitness, exactly as the search runs
it) with per-stage timings and CPU seconds; with ``--curve``, the reference layers' and
controls' validation accuracy on each anchor after each of the given step counts (one
training per anchor, evaluated along the way). The JSON (rewritten after every layer) holds
the command, the configuration, every result and a summary: per layer the mean and sample
std over seeds of its mean accuracy and how many seeds accepted it, and whether the proxy
*discriminates*:

* every reference layer is accepted on every seed;
* every control is rejected on every seed or scores at least ``--margin`` (0.10) below
  BN-ReLU's mean over seeds (in both modes: BN-ReLU is measured beside mode S's references
  too, as the layer a proxy must separate from no normalization);
* section 4.4's unstable example is rejected on every seed, and the stability test alone
  (run on it whatever the earlier stages decided) rejects it on every seed.

Settings are those of ``search/evolve.py`` (the same flags), starting from ``--preset``.
``--resume`` continues a stopped calibration in ``--json``: its measurements are kept and only the
(layer, seed) pairs it lacks are measured (a pair measures the same with or without a stop: each
training starts from the seed); it refuses a file measured with other settings or holding a layer
this command does not measure.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from evonorm_core.experiment.arguments import DistinctValues, output_file, seed
from evonorm_core.experiment.config import (
    ConfigError,
    add_config_arguments,
    command_line,
    config_from_dict,
    config_to_dict,
    explicit_values,
    flag_name,
    option_values,
    replace_config,
)
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json, read_json_object, require_keys
from evonorm_core.experiment.progress import Progress
from evonorm_core.experiment.stopping import stop_signal, stop_signals_interrupt
from evonorm_core.experiment.tables import mean_std_fields
from evonorm_core.ops import status as kernel_status
from evonorm_core.search.expression import parse, to_infix
from evonorm_core.search.genome import Genome, random_genome
from evonorm_core.search.rejection import static_rejection
from evonorm_suite.search.config import CONTROL_LAYERS, CONTROL_MODES, NAMED_LAYERS, SearchConfig
from evonorm_suite.search.presets import DEFAULT_PRESET, PRESETS, preset
from evonorm_suite.search.proxy import ProxyEvaluator, _AnchorTraining

BASELINE = "bn_relu"
UNSTABLE = "unstable_example"
MAX_RANDOM = 1000
SAVED_KEYS = ("config", "results", "wall_seconds", "cpu_seconds")
ROW_KEYS = ("layer", "seed", "expression", "status", "stage", "reason", "accuracies", "mean_accuracy", "cpu_seconds")
NOT_A_CALIBRATION = "it was not written by search/calibrate.py or is damaged; run the calibration without --resume"
Plan = dict[tuple[str, int], tuple[str, list[int] | None]]  # (layer, seed) -> (its expression, learning-curve steps)


@dataclass(frozen=True)
class Earlier:
    """What a resumed calibration keeps: its measurements and the time they took."""

    rows: tuple[dict, ...] = ()
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0


def read_earlier(path: Path, config: SearchConfig, planned: Plan) -> Earlier:
    """The calibration in ``path`` to continue, for a command that measures ``planned``. :class:`ConfigError`
    naming what differs if it was measured with other settings or holds a pair not planned so;
    :class:`CorruptFileError` if it is not a calibration."""
    saved = read_json_object(path, what="calibration", keys=SAVED_KEYS, advice=NOT_A_CALIBRATION)
    seconds = [saved["wall_seconds"], saved["cpu_seconds"]]
    if not isinstance(saved["config"], dict) or not isinstance(saved["results"], list) or \
            not all(type(value) in (int, float) for value in seconds):
        raise CorruptFileError(f"calibration {str(path)!r} has no config object, results list or seconds: "
                               f"{NOT_A_CALIBRATION}")
    then, now = option_values(config_from_dict(SearchConfig, saved["config"], source=str(path))), option_values(config)
    if differing := [f"{flag_name(key.rsplit('.', 1)[-1])} {then[key]!r} (now {now[key]!r})"
                     for key in now if then[key] != now[key]]:
        raise ConfigError(f"{path} was measured with other settings: {', '.join(differing)}; give the flags it was "
                          "made with, or run without --resume to measure anew")
    seen = set()
    for row in saved["results"]:
        if not isinstance(row, dict):
            raise CorruptFileError(f"calibration {str(path)!r} holds a result that is not an object: "
                                   f"{NOT_A_CALIBRATION}")
        require_keys(row, ROW_KEYS, path, what="a result of calibration", advice=NOT_A_CALIBRATION)
        if not isinstance(row["layer"], str) or type(row["seed"]) is not int:
            raise CorruptFileError(f"calibration {str(path)!r} holds a result whose layer or seed is "
                                   f"{row['layer']!r} / {row['seed']!r}: {NOT_A_CALIBRATION}")
        pair = row["layer"], row["seed"]
        if planned.get(pair) != (row["expression"], row.get("curve_steps")) or pair in seen:
            raise ConfigError(f"{path} holds {row['layer']} ({row['expression']}) on seed {row['seed']}"
                              f"{' twice' if pair in seen else ', which this command does not measure as such'}: "
                              "give the --seeds, --controls, --random and --curve it was made with")
        seen.add(pair)
    return Earlier(tuple(saved["results"]), *map(float, seconds))


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


def layer_summary(runs: list[dict]) -> dict:
    """One layer over seeds: accepted seeds, mean and sample std of the accepted seeds' mean
    accuracy, the lowest anchor accuracy, the rejections."""
    accepted = [r for r in runs if r["status"] == "accepted"]
    return {
        "accepted_seeds": len(accepted), "seeds": len(runs),
        **mean_std_fields([r["mean_accuracy"] for r in accepted], 4),
        "min_anchor_accuracy": min((min(r["accuracies"].values()) for r in accepted), default=None),
        "rejections": [f"seed {r['seed']}: {r['stage']}: {r['reason']}" for r in runs if r["status"] != "accepted"],
        "rejected_by": sorted({r["stage"] for r in runs if r["status"] != "accepted"}),
        **({"stability_rejected_seeds": sum(r["stability_alone"] is not None for r in runs)}
           if all("stability_alone" in r for r in runs) else {}),
    }


def discrimination(layers: dict[str, dict], references: list[str], controls: list[str], baseline: str,
                   margin: float) -> dict:
    """The three checks of the module doc on per-layer summaries (None where not measured)."""
    base = layers.get(baseline, {}).get("mean")
    checks: dict = {"baseline": baseline, "baseline_mean": base, "margin": margin}
    checks["references_accepted"] = all(layers[n]["accepted_seeds"] == layers[n]["seeds"] for n in references)
    apart = {}
    for name in controls:
        layer = layers[name]
        apart[name] = layer["accepted_seeds"] == 0 or (base is not None and layer["mean"] <= base - margin)
    checks["controls_apart"] = apart
    if UNSTABLE in controls:
        checks["unstable_rejected_by_stability"] = layers[UNSTABLE]["stability_rejected_seeds"] == \
            layers[UNSTABLE]["seeds"]
    checks["discriminates"] = checks["references_accepted"] and all(apart.values()) and \
        checks.get("unstable_rejected_by_stability", True)
    return checks


def summarize(rows: list[dict], references: list[str], controls: list[str], margin: float) -> dict:
    named = [*references, *([BASELINE] if BASELINE not in references else []), *controls]
    layers = {name: layer_summary([r for r in rows if r["layer"] == name]) for name in named
              if any(r["layer"] == name for r in rows)}
    summary: dict = {"layers": layers, "random": {}}
    if all(name in layers for name in named):
        summary["discrimination"] = discrimination(layers, references, controls, BASELINE, margin)
    random_runs = [r for r in rows if r["layer"] not in named]
    if random_runs:
        stages: dict[str, int] = {}
        for r in random_runs:
            stages[r["stage"] or "accepted"] = stages.get(r["stage"] or "accepted", 0) + 1
        summary["random"] = {"evaluated": len(random_runs), "outcomes": stages,
                             "accepted_fraction": round(stages.get("accepted", 0) / len(random_runs), 3)}
    summary["cpu_seconds_per_candidate"] = {
        kind: round(statistics.fmean(r["cpu_seconds"] for r in rows if (r["layer"] in named) == is_named), 2)
        for kind, is_named in (("named", True), ("random", False))
        if any((r["layer"] in named) == is_named for r in rows)
    }
    return summary


# SearchConfig's fields that only a search uses (calibrate has --seeds and trains one layer at a time)
CALIBRATION_EXCLUDES = ("seed", "max_candidates", "time_budget", "time_limit", "workers", "backend", "ray_address")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python search/calibrate.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", dest="preset_name", choices=sorted(PRESETS), default=DEFAULT_PRESET,
                        help=f"starting values of the settings (default: {DEFAULT_PRESET})")
    parser.add_argument("--json", type=output_file, required=True, help="where to write the measurements")
    parser.add_argument("--seeds", type=seed, nargs="+", action=DistinctValues, default=[0, 1, 2],
                        help="training seeds, distinct (default: 0 1 2)")
    parser.add_argument("--controls", nargs="+", choices=[*CONTROL_LAYERS, "none"],
                        help="negative controls to measure ('none': skip; default: the mode's, all of them in mode B, "
                        "all but the unstable example in mode S)")
    parser.add_argument("--margin", type=float, default=0.10,
                        help="how far below the baseline's mean accuracy a control must score (default: 0.10)")
    parser.add_argument("--random", type=int, default=0, help=f"random layers to evaluate besides the named ones "
                        f"(0..{MAX_RANDOM})")
    parser.add_argument("--curve", type=int, nargs="*", help="also record the named layers' learning curves at "
                        "these step counts")
    parser.add_argument("--resume", action="store_true", help="continue the calibration in --json (stopped by a "
                        "signal or a crash): keep its measurements and measure the (layer, seed) pairs it lacks; the "
                        "other flags must be those it was made with (--seeds and --random may add pairs)")
    settings = parser.add_argument_group("settings", "as search/evolve.py (a search's own seed, stop conditions "
                                         "and workers are not calibrate's: it trains one layer at a time)")
    add_config_arguments(settings, SearchConfig, defaults=preset(DEFAULT_PRESET, "B"), exclude=CALIBRATION_EXCLUDES,
                         resumes=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, bad, accepted, value in (
            ("--random", not 0 <= args.random <= MAX_RANDOM, f"in 0..{MAX_RANDOM}", args.random),
            ("--curve", any(s < 1 for s in args.curve or []), "steps >= 1", args.curve),
            ("--margin", not 0 <= args.margin <= 1, "in [0, 1]", args.margin)):
        if bad:
            parser.error(f"{flag} must be {accepted}, got {value}")
    if args.controls and "none" in args.controls and len(args.controls) > 1:
        parser.error(f"--controls: 'none' cannot be combined with layers, got {' '.join(args.controls)}")
    explicit = explicit_values(args, SearchConfig)
    try:
        config = replace_config(preset(args.preset_name, explicit.get("evolution.mode", "B")), explicit)
        ProxyEvaluator(config.proxy).data()  # a missing dataset fails here, not after the first layer
    except (ConfigError, ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    mode = config.evolution.mode
    controls = [] if args.controls == ["none"] else list(args.controls or CONTROL_MODES[mode])
    references = list(config.reference_genomes())
    layers = {**config.reference_genomes(), BASELINE: parse(NAMED_LAYERS[BASELINE]),
              **{name: parse(CONTROL_LAYERS[name]) for name in controls},
              **random_layers(args.random, mode, config.evolution.max_nodes)}
    curve_layers = (*references, BASELINE, *controls)
    planned = {(name, run_seed): (to_infix(genome), sorted(args.curve) if args.curve and name in curve_layers else None)
               for run_seed in args.seeds for name, genome in layers.items()}
    try:
        earlier = read_earlier(args.json, config, planned) if args.resume else Earlier()
    except (ConfigError, CorruptFileError, FileNotFoundError) as error:
        parser.error(str(error))
    head = {"command": command_line("python search/calibrate.py", [a for a in argv_of(argv) if a != "--resume"]),
            "config": config_to_dict(config), "seeds": args.seeds, "threads": torch.get_num_threads(),
            # the C++ kernels and the operators' PyTorch implementation agree to rounding, which training amplifies
            "cpu_kernels": str(kernel_status())}
    rows = list(earlier.rows)
    done = {(row["layer"], row["seed"]) for row in rows}
    todo = [pair for pair in planned if pair not in done]
    print(f"calibration: mode {mode}, {len(layers)} layers ({', '.join(layers)}) on seeds "
          f"{' '.join(map(str, args.seeds))}, {config.proxy.describe()}; measurements: {args.json}"
          + (f" (resumed: {len(rows)} kept, {len(todo)} to measure)" if args.resume else ""), flush=True)
    started = time.monotonic()
    progress = Progress(len(todo), "layers", prefix="calibration", interval=60.0)
    received = None
    try:
        with stop_signals_interrupt() as received:
            for run_seed in args.seeds:
                evaluator = ProxyEvaluator(config.proxy, seed=run_seed, threads=config.torch_threads)
                for name, genome in layers.items():
                    if (name, run_seed) in done:
                        continue
                    row = measure(evaluator, name, genome, planned[name, run_seed][1])
                    if name == UNSTABLE:
                        row["stability_alone"] = evaluator.stability_failure(genome, evaluator.data())
                        print(f"seed {run_seed} {name:<17} stability test alone: {row['stability_alone'] or 'passes'}")
                    rows.append(row)
                    summary = summarize(rows, references, controls, args.margin)
                    write(args.json, head, rows, summary, earlier, started)  # partial after a kill
                    progress.update()
    except KeyboardInterrupt:
        stopped = stop_signal(received)
        print(f"stopped by {stopped.name}: the {len(rows)} measurements made are in {args.json}; add --resume to "
              "measure the rest", file=sys.stderr)
        return 128 + stopped
    summary = summarize(rows, references, controls, args.margin)
    write(args.json, head, rows, summary, earlier, started)  # a resume with nothing left still records its summary
    print_checks(summary)
    print(f"measurements: {args.json}")
    return 0


def argv_of(argv: list[str] | None) -> list[str]:
    return sys.argv[1:] if argv is None else argv


def measure(evaluator: ProxyEvaluator, name: str, genome: Genome, curve: list[int] | None) -> dict:
    """One layer through the whole pipeline on the evaluator's seed, printed as one line."""
    cpu = time.process_time()
    result = evaluator(genome.to_dict())
    row = {"layer": name, "expression": to_infix(genome), "seed": evaluator.seed, **result.to_dict(),
           "mean_accuracy": round(result.mean_accuracy, 4) if result.accuracies else None,
           "cpu_seconds": round(time.process_time() - cpu, 2)}
    if curve:
        row["curve_steps"] = sorted(curve)
        row["curves"] = learning_curve(evaluator, genome, sorted(curve))
    accs = " / ".join(f"{v:.3f}" for v in result.accuracies.values())
    print(f"seed {evaluator.seed} {name:<17} {result.status:<8} {str(result.stage or ''):<9} {accs:<21} "
          f"{row['cpu_seconds']:6.1f} CPU s  {result.reason}", flush=True)
    return row


def print_checks(summary: dict) -> None:
    for name, layer in summary["layers"].items():
        mean = "-" if layer["mean"] is None else f"{layer['mean']:.3f}" + (
            "" if layer["std"] is None else f" ± {layer['std']:.3f}")
        print(f"{name:<17} accepted {layer['accepted_seeds']}/{layer['seeds']} seeds, mean accuracy {mean}"
              + (f"; rejected by {', '.join(layer['rejected_by'])}" if layer["rejected_by"] else ""))
    checks = summary.get("discrimination")
    if checks:
        far = [n for n, ok in checks["controls_apart"].items() if not ok]
        print(f"every reference accepted on every seed: {'yes' if checks['references_accepted'] else 'NO'}; "
              f"every control rejected or >= {checks['margin']:.2f} below {checks['baseline']}: "
              f"{'yes' if not far else 'NO (' + ', '.join(far) + ')'}"
              + ("" if "unstable_rejected_by_stability" not in checks else
                 f"; unstable example rejected by the stability test: "
                 f"{'yes' if checks['unstable_rejected_by_stability'] else 'NO'}"))
        print(f"the proxy {'discriminates' if checks['discriminates'] else 'does NOT discriminate'}")


def write(path: Path, head: dict, rows: list[dict], summary: dict, earlier: Earlier, started: float) -> None:
    """The calibration's JSON: ``head`` (command, settings), its time (this session's added to ``earlier``'s),
    ``summary`` and every measurement."""
    atomic_write_json(path, {
        **head, "wall_seconds": round(earlier.wall_seconds + time.monotonic() - started, 1),
        "cpu_seconds": round(earlier.cpu_seconds + time.process_time(), 1), "summary": summary, "results": rows,
    })


if __name__ == "__main__":
    sys.exit(main())
