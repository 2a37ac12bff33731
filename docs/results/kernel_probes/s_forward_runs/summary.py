"""The tables of this probe: the operators alone (op_min.sh's op_min.txt: range over the five rounds of each
side's minimum, microseconds) and the S layers against GN-SiLU in tools/benchmark_layers.py (layer_ab.sh's JSON:
range over the three rounds of each fused S layer's eager ratio, per pass). Prints summary.txt.

    python docs/results/kernel_probes/s_forward_runs/summary.py [FOLDER]   # FOLDER: a later probe's outputs
"""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent
CELL = re.compile(r"\s*(\S+) s_backward\s+([\d.]+) s_forward\s+([\d.]+)")


def span(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def operator_table() -> list[str]:
    times = defaultdict(lambda: defaultdict(list))  # shape -> (side, op) -> us
    for line in (HERE / "op_min.txt").read_text().splitlines():
        side, cells = line.split(" ", 1)
        for cell in cells.split("|"):
            shape, backward, forward = CELL.match(cell).groups()
            times[shape][(side, "s_forward")].append(float(forward))
            times[shape][(side, "s_backward")].append(float(backward))
    lines = ["| shape | s_forward before | after | s_backward before | after |", "| --- | ---: | ---: | ---: | ---: |"]
    for shape, cell in times.items():
        spans = [span(cell[(side, op)], 1) for op in ("s_forward", "s_backward") for side in ("before", "after")]
        lines.append(f"| {shape} | " + " | ".join(spans) + " |")
    return lines


def layer_lines() -> list[str]:
    ratios = defaultdict(list)
    for path in sorted(HERE.glob("*_*_*.json")):
        side, passes, _ = path.stem.split("_")
        for row in json.loads(path.read_text())["layers"]:
            if row["layer"].startswith("evonorm_s") and row["layer"].endswith("(fused)"):
                shape = "x".join(map(str, row["shape"]))
                ratios[(passes, shape, row["layer"].split()[0], side)].append(row["ratio"])
    return [f"{passes:9} {shape:12} {layer:11} {side:6} {span(values, 2)}x GN-SiLU over {len(values)} runs"
            for (passes, shape, layer, side), values in sorted(ratios.items())]


if __name__ == "__main__":
    print("\n".join(operator_table() + [""] + layer_lines()))
