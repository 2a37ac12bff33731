#!/usr/bin/env bash
# What the S operators' sigmoid costs: a copy of this tree with sigmoid_cost.patch applied (the sigmoid replaced by
# the linear z / 4 + 1/2: wrong results, the same loops and memory traffic; op_ab.py's "before" side) against this
# tree ("after"), the operators alone (op_ab.py at ResNet-50's batch-4 and batch-16 shapes), two alternating rounds,
# every other job of the machine stopped.
#   git worktree add --detach /tmp/nosigmoid HEAD && git -C /tmp/nosigmoid apply "$PWD/docs/results/kernel_probes/sigmoid_cost.patch" \
#     && (cd /tmp/nosigmoid && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/sigmoid_cost.sh /tmp/nosigmoid
# (sigmoid_cost.txt was written by this script's earlier form: the same alternation, each run's medians printed as
# it went, two runs of it.)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python "$here/op_ab.py" --ab "$1" "$(mktemp -d)" --ops s_forward,s_backward,b_forward,b_backward \
  4x1024x8x8 4x2048x4x4 4x512x16x16 16x2048x7x7
