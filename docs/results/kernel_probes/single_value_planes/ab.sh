#!/usr/bin/env bash
# Planes of one value taken as channels_last rows by the B operators and the S forward (this tree) against the
# per-plane NCHW kernels (before: the commit given as $1, built in place), the operators alone (op_ab.py), two
# alternating rounds, every other job of the machine stopped.
#   git worktree add --detach /tmp/before 8831d35 && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/single_value_planes/ab.sh /tmp/before
# Writes {before,after}_{1,2}.json beside this script and prints summary.txt's table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
for round in 1 2; do
  (cd "$before" && PYTHONPATH="$before" python "$here/op_ab.py" "$here/before_$round.json" > /dev/null)
  (cd "$after" && PYTHONPATH="$after" python "$here/op_ab.py" "$here/after_$round.json" > /dev/null)
done
python "$here/op_ab.py" --summary "$here"
