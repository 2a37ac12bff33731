#!/usr/bin/env bash
# Planes of one value taken as channels_last rows by the B operators and the S forward (this tree) against the
# per-plane NCHW kernels (before: the commit given as $1, built in place), the operators alone (../op_ab.py at its
# default shapes), two alternating rounds, every other job of the machine stopped.
#   git worktree add --detach /tmp/before 8831d35 && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/single_value_planes/ab.sh /tmp/before
# Writes {before,after}_{1,2}.json beside this script and prints summary.txt's table.
# (The committed run timed s_forward, s_backward, b_forward and b_backward; b_inference was added to op_ab.py after.)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python "$here/../op_ab.py" --ab "$1" "$here" --ops s_forward,s_backward,b_forward,b_backward
