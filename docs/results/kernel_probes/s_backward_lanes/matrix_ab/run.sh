#!/usr/bin/env bash
# The matrix (python tools/benchmark_layers.py --matrix) alternating between af04715 (before the bfloat16 lanes,
# a git worktree built in place with python setup.py build_ext --inplace) and c24f265 (after), three runs a side,
# nothing else running (2026-12-02 01:27-01:32 UTC, 2 threads, AMD EPYC with AVX-512 BF16). Usage:
#   run.sh BEFORE_TREE AFTER_TREE OUT_DIR
set -euo pipefail
before=$1 after=$2 out=$3
for r in 1 2 3; do
  for side in before after; do
    tree=${!side}
    (cd "$tree" && PYTHONPATH="$tree" python tools/benchmark_layers.py --matrix --plot '' --json "$out/ab_${side}_$r.json")
  done
done
python "$(dirname "$0")/summary.py" "$out"
