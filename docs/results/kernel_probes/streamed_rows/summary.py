"""Medians over rounds of ops_time.py's JSON lines, per dtype, shape and library, and after/before ratios.

    python summary.py RESULTS.jsonl [BEFORE_NAME AFTER_NAME]
"""
import collections
import json
import statistics
import sys
from pathlib import Path

OPS = ["b_fwd_train", "b_fwd_eval", "b_bwd", "s_fwd", "s_bwd"]
rows = [json.loads(line) for line in open(sys.argv[1])]
runs = collections.defaultdict(list)
for so, dtype, res in rows:
    for shape, times in res.items():
        runs[dtype, shape, Path(so).stem].append(times)
names = sys.argv[2:4] if len(sys.argv) > 3 else None
for (dtype, shape, name), got in sorted(runs.items()):
    med = [statistics.median(t[i] for t in got) for i in range(len(OPS))]
    line = f"{dtype:9s} {shape:14s} {name:8s} n={len(got)} " + "  ".join(f"{o} {m:7.3f}" for o, m in zip(OPS, med))
    if names and name == names[1] and (dtype, shape, names[0]) in runs:
        before = runs[dtype, shape, names[0]]
        ratios = [m / statistics.median(t[i] for t in before) for i, m in enumerate(med)]
        line += "   after/before " + " ".join(f"{r:.2f}" for r in ratios)
    print(line)
