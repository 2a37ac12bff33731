"""Summarize the Table 3 difficulty probes: final top-1 per layer, the last fifth's range, and the gate's test.

    python docs/results/classification/table3_harder_digits/summarize.py RUNS_DIR [RUNS_DIR ...] --json OUT

Each RUNS_DIR is a ``classification/tables.py run table3 --scale mini --runs-dir`` folder of ResNet50-CIFAR cells at
one images-per-worker size. Printed and written per folder: each layer's final top-1 per seed (a diverged run counts
as 0, as in the report), mean and std, the largest range of its validation top-1 over the last fifth of training,
and the gate's comparison, GN-ReLU over the no-normalization control, as the report tests it (one-sided paired t on
the per-seed differences; uncorrected: the report's Holm family would ask more of it).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from evonorm_core.experiment.files import atomic_write_json, read_json
from evonorm_core.experiment.verdicts import Comparison, Sample, run_test

REFERENCE, CONTROL = "gn_relu", "no_norm_relu"


def layer_runs(runs_dir: Path) -> dict[str, dict[int, dict]]:
    """``{layer: {seed: {"top1", "last_fifth_range", "config"}}}`` of the finished runs under ``runs_dir``."""
    layers: dict[str, dict[int, dict]] = {}
    for config_path in sorted(runs_dir.glob("*/*/b*/seed*/config.json")):
        run = config_path.parent
        config = read_json(config_path, what="run config")
        if (run / "result.json").is_file():
            result = read_json(run / "result.json", what="run result")
            entry = {"top1": result["final_top1"], "last_fifth_range": result["flatness"]["range"]}
        elif (run / "diverged.json").is_file():
            entry = {"top1": 0.0, "last_fifth_range": None}
        else:
            continue
        entry["config"] = {k: config[k] for k in ("data", "batch_size", "workers", "epochs", "base_lr")}
        layers.setdefault(config["norm_act"], {})[config["seed"]] = entry
    return layers


def summary(runs_dir: Path) -> dict:
    layers = layer_runs(runs_dir)
    out: dict = {"runs_dir": str(runs_dir), "layers": {}}
    for layer, seeds in layers.items():
        top1 = [seeds[s]["top1"] for s in sorted(seeds)]
        ranges = [seeds[s]["last_fifth_range"] for s in sorted(seeds) if seeds[s]["last_fifth_range"] is not None]
        out["layers"][layer] = {"seeds": sorted(seeds), "top1": top1, "mean": statistics.fmean(top1),
                                "std": statistics.stdev(top1) if len(top1) > 1 else None,
                                "max_last_fifth_range": max(ranges, default=None),
                                "setting": next(iter(seeds.values()))["config"]}
    if REFERENCE in layers and CONTROL in layers:
        sides = [Sample(layer, tuple(layers[layer][s]["top1"] for s in sorted(layers[layer])), tuple(sorted(layers[layer])))
                 for layer in (REFERENCE, CONTROL)]
        test = run_test(Comparison(*sides))
        out["gate"] = {"test": test.test, "difference": test.difference, "t": test.statistic, "p": test.p,
                       "p_opposite": test.p_opposite}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dirs", nargs="+", type=Path, help="tables.py run --runs-dir folders")
    parser.add_argument("--json", type=Path, required=True, help="where to write the summaries")
    args = parser.parse_args()
    summaries = [summary(d) for d in args.runs_dirs]
    for s in summaries:
        print(s["runs_dir"])
        for layer, row in s["layers"].items():
            std = "-" if row["std"] is None else f"{row['std']:.1f}"
            spread = "-" if row["max_last_fifth_range"] is None else f"{row['max_last_fifth_range']:.1f}"
            print(f"  {layer:14s} {row['mean']:5.1f} ± {std} {row['top1']} last-fifth range <= {spread}"
                  f"  {row['setting']}")
        if "gate" in s:
            g = s["gate"]
            print(f"  gate GN-ReLU - control: {g['difference']:+.2f} ({g['test']}, t = {g['t']:.2f}, p = {g['p']:.3g}, "
                  f"opposite p = {g['p_opposite']:.3g})")
    atomic_write_json(args.json, summaries)


if __name__ == "__main__":
    main()
