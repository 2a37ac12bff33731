#!/usr/bin/env bash
# The B series' NCHW plane loops with sb checked for NaN once per plane and the NaN-propagating gradient routing
# (this tree) against the loops before (the commit given as $1, built in place): the operators alone (../op_ab.py at
# NCHW shapes where planes are small and the B series is bound by arithmetic), two alternating rounds, every other
# job of the machine stopped.
#   git worktree add --detach /tmp/before 4e7ff59 && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/b_plane_nan_check/ab.sh /tmp/before
# Writes {before,after}_{1,2}.json beside this script and prints summary.txt's table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python "$here/../op_ab.py" --ab "$1" "$here" 16x2048x7x7 2x2048x7x7 16x1024x14x14 2x1024x14x14 4x1024x8x8 16x256x56x56
