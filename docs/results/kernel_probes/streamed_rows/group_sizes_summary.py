"""Medians over rounds of group_sizes_time.py's lines, per shape and build: python group_sizes_summary.py FILE"""
import collections
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for so, res in rows:
    build = so.split("/")[-1].removesuffix(".so")
    for shape, times in res.items():
        runs[shape][build].append(times)
for shape, builds in runs.items():
    print(shape)
    for build, got in builds.items():
        med = [statistics.median(t[i] for t in got) for i in range(4)]
        names = ["b_train", "b_eval", "b_bwd", "s_fwd"]
        print(f"  {build:8s}", "  ".join(f"{n} {m:.3f}" for n, m in zip(names, med)), f" (n={len(got)})")
