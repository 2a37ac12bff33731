"""Summarize lr_seeds.sh's runs into lr_seeds.json: each (layer, peak LR)'s final validation top-1 per seed, its mean
and sample std, and, for EvoNorm-B0 against BN-ReLU at the same LR, the paired t-test over seeds (two-sided,
scipy.stats.ttest_rel). Run from the repository root after lr_seeds.sh:

    python docs/results/classification/b0_workers_probe/summarize_lr_seeds.py
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from scipy import stats

HERE = Path(__file__).parent
RUN = re.compile(r"(?P<prefix>bn_relu_)?8x32_lr(?P<lr>[0-9.]+)_seed(?P<seed>\d+)\.txt")


def final_top1(path: Path) -> float:
    """The probe's top-1 after the last epoch: the line's first "loss / top-1" pair."""
    last = path.read_text().strip().splitlines()[-1]
    return float(last.split("|")[0].split("/")[1])


def main() -> None:
    groups: dict[tuple[str, str], dict[int, float]] = {}
    for path in sorted(HERE.glob("*8x32_lr*_seed*.txt")):
        match = RUN.fullmatch(path.name)
        if match:
            layer = "BN-ReLU" if match["prefix"] else "EvoNorm-B0"
            groups.setdefault((layer, match["lr"]), {})[int(match["seed"])] = final_top1(path)
    cells = [{"layer": layer, "peak_lr": float(lr), "seeds": sorted(top1), "final_top1": [top1[s] for s in sorted(top1)],
              "mean": statistics.fmean(top1.values()), "std": statistics.stdev(top1.values())}
             for (layer, lr), top1 in sorted(groups.items())]
    tests = []
    for (layer, lr), b0 in sorted(groups.items()):
        bn = groups.get(("BN-ReLU", lr))
        if layer == "EvoNorm-B0" and bn and sorted(bn) == sorted(b0):
            seeds = sorted(b0)
            test = stats.ttest_rel([b0[s] for s in seeds], [bn[s] for s in seeds])
            tests.append({"peak_lr": float(lr), "comparison": "EvoNorm-B0 - BN-ReLU, paired by seed",
                          "mean_difference": statistics.fmean(b0[s] - bn[s] for s in seeds),
                          "t": float(test.statistic), "p_two_sided": float(test.pvalue)})
    out = HERE / "lr_seeds.json"
    out.write_text(json.dumps({"command": "bash docs/results/classification/b0_workers_probe/lr_seeds.sh",
                               "setting": "ResNet50-CIFAR, Table 2's 8 x 32 images, 15 epochs, one thread",
                               "cells": cells, "paired_tests": tests}, indent=1) + "\n")
    for cell in cells:
        print(f"{cell['layer']:11s} LR {cell['peak_lr']:<6g} {cell['mean']:5.1f} ± {cell['std']:4.1f}  {cell['final_top1']}")
    for test in tests:
        print(f"LR {test['peak_lr']:g}: {test['comparison']} {test['mean_difference']:+.2f}, t = {test['t']:.2f}, "
              f"p = {test['p_two_sided']:.3g}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
