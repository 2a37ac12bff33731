"""Range over the rounds of each fused S layer's fwd+bwd ratio to GN-SiLU, before and after, from layer_ab.sh's
JSON beside this script. Prints summary.txt's lines.

    python docs/results/kernel_probes/s_plane_pairs/summary.py
"""
import json
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ratios = defaultdict(list)
    for path in sorted(HERE.glob("*_*_*.json")):
        side = path.name.split("_")[0]
        for row in json.loads(path.read_text())["layers"]:
            if "(fused)" in row["layer"] and "compiled" not in row["layer"]:
                shape = "x".join(map(str, row["shape"]))
                ratios[(shape, row["layer"].split()[0], side)].append(row["ratio"])
    for (shape, layer, side), values in sorted(ratios.items()):
        print(f"{shape:15} {layer:11} {side:6} {min(values):.2f}-{max(values):.2f}x GN-SiLU over {len(values)} runs")


if __name__ == "__main__":
    main()
