"""A folder's interleaved A/B runs (interleaved_ab.py's JSON) as tables: per dtype, shape and operator, the ratio
(this tree's time over BEFORE's, median of the pairs' ratios) of each run of a set. The folder: this script's, or
the one named.

    python docs/results/kernel_probes/b_inference_lanes/summary.py [FOLDER]
"""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def runs_by_set(folder: Path = HERE) -> dict[str, list[dict]]:
    """The folder's JSON files grouped by name without the trailing run number (ab_float32_1.json -> ab_float32)."""
    sets = defaultdict(list)
    for path in sorted(folder.glob("*.json")):
        sets[re.sub(r"_\d+$", "", path.stem)].append(json.loads(path.read_text()))
    return sets


def table(name: str, runs: list[dict]) -> str:
    config = runs[0]["config"]
    lines = [f"{name}: {'channels_last' if config['channels_last'] else 'NCHW'} {config['dtype']}, before "
             f"{config['before']}, {config['reps']} pairs, {len(runs)} run(s), {config['cpu']}"]
    for shape, ops in runs[0]["shapes"].items():
        cells = [f"{op} " + "/".join(f"{run['shapes'][shape][op]['ratio']:.3f}" for run in runs) for op in ops]
        lines.append(f"  {shape:14s} " + "  ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    print("\n\n".join(table(name, runs) for name, runs in runs_by_set(folder).items()))
