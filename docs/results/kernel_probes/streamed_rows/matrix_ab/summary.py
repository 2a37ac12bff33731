"""The alternating matrix runs of this folder (default_ab.sh with ARGS=--matrix): targets met per run, and the
channels_last ratios at 56x56 (batch 16) of each side.  python summary.py [FOLDER]"""
import json
import sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
for side in ("before", "after"):
    for path in sorted(folder.glob(f"ab_{side}_*.json")):
        run = json.loads(path.read_text())
        met = sum(t["met"] for cell in run["cells"] for t in cell["targets"])
        total = sum(len(cell["targets"]) for cell in run["cells"])
        print(f"{path.stem}: {met} of {total} targets met (other processes busy on {run.get('busy_elsewhere')} CPUs)")
        for cell in run["cells"]:
            if cell["layout"] != "channels_last" or cell["batch"] != 16:
                continue
            ratios = [f"{layer['layer'].split()[0].removeprefix('evonorm_')} {layer['ratio']:.2f}"
                      for layer in cell["layers"] if "fused" in layer["layer"] and layer["shape"][2] == 56]
            print(f"  channels_last {cell['dtype']:8s} {cell['step']:9s} 16x256x56x56: {' '.join(ratios)}")
