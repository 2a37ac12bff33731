"""The alternating matrix runs of this folder (run.sh): targets met per run by dtype and kind, then for S0 in each
cell at batch 16 the median over the three runs of its ratio to GN-SiLU and of its copy-rate fraction, before ->
after.  python summary.py [FOLDER]"""
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
s0 = {"before": defaultdict(list), "after": defaultdict(list)}
for side in ("before", "after"):
    for path in sorted(folder.glob(f"ab_{side}_*.json")):
        met, total = Counter(), Counter()
        for cell in json.loads(path.read_text())["cells"]:
            for target in cell["targets"]:
                kind = "copy" if "copy rate" in target["target"] else target["target"][:9]
                met[cell["dtype"], kind] += target["met"]
                total[cell["dtype"], kind] += 1
            for layer in cell["layers"]:
                if layer["layer"] == "evonorm_s0 (fused)" and cell["batch"] == 16:
                    key = (cell["layout"], cell["dtype"], cell["step"], "x".join(map(str, layer["shape"][1:])))
                    s0[side][key].append((layer["ratio"], layer["roofline"] or 0.0))
        print(f"{path.stem}: {sum(met.values())} of {sum(total.values())};",
              ", ".join(f"{d} {k.removeprefix('evonorm_')} {met[d, k]}/{total[d, k]}" for d, k in sorted(total)))
print("\nS0 at batch 16, medians of the three runs: ratio to GN-SiLU, fraction of the copy rate (before -> after)")
for key in sorted(s0["after"]):
    b, a = s0["before"][key], s0["after"][key]
    ratio, copy = ([statistics.median(x[i] for x in runs) for runs in (b, a)] for i in (0, 1))
    print(f"  {' '.join(key):42s} ratio {ratio[0]:.2f} -> {ratio[1]:.2f}   copy {copy[0]:.2f} -> {copy[1]:.2f}")
