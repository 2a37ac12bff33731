"""Ranges of this folder's default runs: per speed target, the ratio over the before and after runs of
default_ab.sh (ab_*.json), with the after-only runs (after_only_*.json) beside; then the 7x7 stage's times per run
(GN-SiLU, fused S0, BN-ReLU, fused B0: B0's kernels are the same on both sides). Prints summary.txt; given a
folder, the runs there (default_ab.sh with OUT).

    python docs/results/kernel_probes/plane_tails/default_runs/summary.py [FOLDER]
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGE = [16, 2048, 7, 7]
SIDES = {"before": "ab_before_*.json", "after": "ab_after_*.json", "after only": "after_only_*.json"}


def span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "-"


def main(folder: Path) -> None:
    runs = {side: [(p.name, json.loads(p.read_text())) for p in sorted(folder.glob(pattern))]
            for side, pattern in SIDES.items()}
    runs = {side: side_runs for side, side_runs in runs.items() if side_runs}
    ratios = defaultdict(lambda: defaultdict(list))
    for side, side_runs in runs.items():
        met = [sum(t["met"] for t in run["targets"]) for _, run in side_runs]
        print(f"{side}: {len(side_runs)} runs, targets met {', '.join(map(str, met))} of {len(side_runs[0][1]['targets'])}")
        for _, run in side_runs:
            for target in run["targets"]:
                ratios[target["target"]][side].append(target["ratio"])
    print()
    for target, by_side in ratios.items():
        print(f"{target:80} " + " | ".join(f"{side} {span(by_side[side])}" for side in SIDES))
    print("\n7x7 stage, median ms (ratio):")
    for side, side_runs in runs.items():
        for name, run in side_runs:
            rows = {row["layer"]: row for row in run["layers"] if row["shape"] == STAGE}
            cells = [f"{layer} {rows[layer]['ms']:.2f} ({rows[layer]['ratio']:.2f})" for layer in
                     ("gn_silu (native)", "evonorm_s0 (fused)", "bn_relu (native)", "evonorm_b0 (fused)")]
            print(f"{side:10} {name:22} " + ", ".join(cells))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
