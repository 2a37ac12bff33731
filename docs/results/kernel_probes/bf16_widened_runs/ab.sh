#!/usr/bin/env bash
# Half-precision NCHW planes under 64 values widened to float32 a run at a time (on_run in csrc/evonorm_ops.cpp):
# the operators of a tree without it (the commit given as $1, built in place) against this tree in bfloat16, alone
# (../op_ab.py), three alternating rounds, every other job of the machine stopped.
#   git worktree add --detach /tmp/before <commit> && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/bf16_widened_runs/ab.sh /tmp/before b     # the B forward (before: f078c9a)
#   bash docs/results/kernel_probes/bf16_widened_runs/ab.sh /tmp/before s     # the S forward (before: 7581399)
# Writes {before,after}_{1,2,3}.json into b/ or s/ beside this script and prints that folder's summary.txt.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${2:?b or s}" in
  b) ops=b_forward,b_inference,b_backward ;;
  s) ops=s_forward,s_backward ;;
  *) echo "the second argument is b or s, not '$2'" >&2; exit 2 ;;
esac
python "$here/../op_ab.py" --ab "$1" "$here/$2" --rounds 3 --dtype bfloat16 --ops $ops \
  16x2048x7x7 2x2048x7x7 16x1024x14x14 16x512x28x28
