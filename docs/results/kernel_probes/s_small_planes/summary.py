"""ab.sh's JSON: the fused layers' eager fwd+bwd per shape (ms, and the ratio to the series' baseline of the same
run: GN-SiLU for S, BN-ReLU for B), before and after the small-plane S backward; the eager training steps'
EvoNorm / native ratios (median over rounds) per run. B0 (in the runs because --compiled-layers defaults to S0
and B0) is the same code on both sides: its after / before is the noise of these runs."""
import json
import math
import statistics
import sys
from pathlib import Path


def load(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def layer_rows(folder: Path, side: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(layer, shape) -> [(ms, ratio) per round]."""
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in (1, 2):
        for r in load(folder, f"{side}_layers_{round_}.json")["layers"]:
            if "(fused)" in r["layer"] and not r["compiled"]:
                key = (r["layer"].split()[0], "x".join(map(str, r["shape"])))
                rows.setdefault(key, []).append((r["ms"], r["ratio"]))
    return rows


def main(folder: Path) -> None:
    before, after = layer_rows(folder, "before"), layer_rows(folder, "after")
    print("fwd+bwd, two rounds: ms (x baseline) before | after | after / before of the two medians' means")
    for key in sorted(before, key=lambda k: (k[0], -math.prod(map(int, k[1].split("x")[2:])))):
        b, a = before[key], after[key]
        cells = lambda runs: " ".join(f"{ms:.3f} ({ratio:.2f})" for ms, ratio in runs)  # noqa: E731
        change = statistics.mean(ms for ms, _ in a) / statistics.mean(ms for ms, _ in b)
        print(f"{key[0]:11} {key[1]:13} before {cells(b)} | after {cells(a)} | {change:.2f}")
    print("eager training steps, EvoNorm / native (median over 11 rounds), per run")
    for side in ("before", "after"):
        steps: dict[str, list[float]] = {}
        for round_ in (1, 2, 3):
            for m in load(folder, f"{side}_steps_{round_}.json")["models"]:
                steps.setdefault(f"{m['label']} {m['pair']}", []).append(m["ratio"])
        for pair, ratios in steps.items():
            print(f"{side:6} {pair:45} " + " ".join(f"{r:.2f}" for r in ratios) + f" | median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
