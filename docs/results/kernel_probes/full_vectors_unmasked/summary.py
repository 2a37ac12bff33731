"""Tables of this folder's interleaved A/B runs: per shape and operator, after / before (median of the pairs'
ratios) and each side's fastest call in microseconds.

    python docs/results/kernel_probes/full_vectors_unmasked/summary.py
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def table(path: Path) -> str:
    run = json.loads(path.read_text())
    config = run["config"]
    layout = "channels_last" if config["channels_last"] else "NCHW"
    lines = [f"{path.name}: {layout} {config['dtype']}, before {config['before']}, {config['reps']} pairs, {config['cpu']}"]
    for shape, ops in run["shapes"].items():
        cells = [f"{op} {r['ratio']:.3f} ({r['before_us']:.1f} -> {r['after_us']:.1f} us)" for op, r in ops.items()]
        lines.append(f"  {shape:14s} " + "  ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(path) for path in sorted(HERE.glob("*.json"))))
