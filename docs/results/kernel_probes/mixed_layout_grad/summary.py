"""ab.sh's JSON side by side: the operators alone (ms with the gradient channels_last | NCHW, before and after),
the channels_last fused layers' fwd+bwd (ms and the ratio to the series' baseline of the same run, two rounds),
and the whole training steps' EvoNorm / native ratios (each run's median over its rounds)."""
import json
import statistics
import sys
from pathlib import Path


def load(folder: Path, name: str):
    return json.loads((folder / name).read_text())


def print_operators(folder: Path) -> None:
    print("operator alone, ms: grad channels_last | grad NCHW (NCHW / channels_last), before -> after")
    before, after = load(folder, "before_op.json"), load(folder, "after_op.json")
    for b, a in zip(before, after):
        side = lambda r: f"{r['grad_channels_last_ms']:7.3f} | {r['grad_nchw_ms']:7.3f} ({r['ratio']:.2f})"  # noqa: E731
        print(f"{b['op']} {b['shape']:>14}: {side(b)} -> {side(a)}")


def print_layers(folder: Path) -> None:
    print("channels_last fwd+bwd, two rounds: ms (x baseline) before | after")
    cells: dict[tuple[str, str], dict[str, list[str]]] = {}
    for side in ("before", "after"):
        for round_ in (1, 2):
            for r in load(folder, f"{side}_layers_{round_}.json")["layers"]:
                if "(fused)" in r["layer"] and not r["compiled"]:
                    key = (r["layer"].split()[0], "x".join(map(str, r["shape"])))
                    cells.setdefault(key, {}).setdefault(side, []).append(f"{r['ms']:.3f} ({r['ratio']:.2f})")
    for (layer, shape), sides in sorted(cells.items()):
        print(f"{layer:11} {shape:14} before {' '.join(sides['before'])} | after {' '.join(sides['after'])}")


def print_steps(folder: Path) -> None:
    print("training steps, EvoNorm / native (median over rounds), runs 1-3")
    for side in ("before", "after"):
        steps: dict[str, list[float]] = {}
        for round_ in (1, 2, 3):
            for m in load(folder, f"{side}_steps_{round_}.json")["models"]:
                mode = "compiled" if m["compiled"] else "eager"
                steps.setdefault(f"{m['label']} {mode} {m['pair']}", []).append(m["ratio"])
        for pair, ratios in steps.items():
            print(f"{side:6} {pair:59} " + " ".join(f"{r:.2f}" for r in ratios)
                  + f" | median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    for part in (print_operators, print_layers, print_steps):
        part(Path(sys.argv[1]))
