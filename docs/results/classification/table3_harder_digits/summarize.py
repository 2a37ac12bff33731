"""Summarize the Table 3 difficulty probes: final top-1 per layer, the last fifth's range, and the gate's test.

    python docs/results/classification/table3_harder_digits/summarize.py RUNS_DIR [RUNS_DIR ...] --json OUT

Each RUNS_DIR is a ``classification/tables.py run table3 --scale mini --runs-dir`` folder of ResNet50-CIFAR cells at
one images-per-worker size, read by ``tables.py``'s own :func:`summary` (the cells ``tables.py report`` shows).
Printed and written per folder: each layer's final top-1 per seed (a diverged run counts as 0, as in the report),
mean and std, the largest range of its validation top-1 over the last fifth of training, and the gate's
comparison, GN-ReLU over the no-normalization control, as the report tests it (one-sided paired t on the per-seed
differences; uncorrected: the report's Holm family would ask more of it).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from evonorm_core.experiment.files import atomic_write_json
from evonorm_core.experiment.verdicts import Comparison, Sample, run_test
from evonorm_suite.classification.paper_tables import TABLES
from evonorm_suite.classification.tables import DIVERGED_TOP1, summary

REFERENCE, CONTROL = "gn_relu", "no_norm_relu"
SETTING = ("data", "batch_size", "workers", "epochs", "base_lr")


def probe_summary(runs_dir: Path) -> dict:
    """The layers of ``runs_dir``'s cells (one images-per-worker size) and, with both measured, the gate's test."""
    out: dict = {"runs_dir": str(runs_dir), "layers": {}}
    samples = {}
    for cell in summary(TABLES["table3"], runs_dir)["cells"]:
        top1 = [DIVERGED_TOP1 if value is None else value for value in cell["final_top1"]]
        samples[cell["layer"]] = Sample(cell["layer"], tuple(top1), tuple(cell["seeds"]))
        out["layers"][cell["layer"]] = {"seeds": cell["seeds"], "top1": top1, "mean": statistics.fmean(top1),
                                        "std": statistics.stdev(top1) if len(top1) > 1 else None,
                                        "max_last_fifth_range": cell["last_fifth_range_max"],
                                        "setting": {k: cell["setting"][k] for k in SETTING}}
    if REFERENCE in samples and CONTROL in samples:
        test = run_test(Comparison(samples[REFERENCE], samples[CONTROL]))
        out["gate"] = {"test": test.test, "difference": test.difference, "t": test.statistic, "p": test.p,
                       "p_opposite": test.p_opposite}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dirs", nargs="+", type=Path, help="tables.py run --runs-dir folders")
    parser.add_argument("--json", type=Path, required=True, help="where to write the summaries")
    args = parser.parse_args()
    summaries = [probe_summary(d) for d in args.runs_dirs]
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
