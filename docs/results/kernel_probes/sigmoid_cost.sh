#!/usr/bin/env bash
# What the S operators' sigmoid costs: this tree against a copy with sigmoid_cost.patch applied (the sigmoid replaced
# by the linear z / 4 + 1/2: wrong results, the same loops and memory traffic), the operators alone
# (single_value_planes/op_ab.py at ResNet-50's batch-4 and batch-16 shapes), two alternating rounds, every other job
# of the machine stopped.
#   git worktree add --detach /tmp/nosigmoid HEAD && git -C /tmp/nosigmoid apply "$PWD/docs/results/kernel_probes/sigmoid_cost.patch" \
#     && (cd /tmp/nosigmoid && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/sigmoid_cost.sh /tmp/nosigmoid > docs/results/kernel_probes/sigmoid_cost.txt
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
main="$(cd "$here/../../.." && pwd)"
patched="$(cd "$1" && pwd)"
shapes=(4x1024x8x8 4x2048x4x4 4x512x16x16 16x2048x7x7)
out="$(mktemp -d)"
for round in 1 2; do
  for side in main patched; do
    dir=$main; [ $side = patched ] && dir=$patched
    echo "== $side, round $round"
    (cd "$dir" && PYTHONPATH="$dir" python "$here/single_value_planes/op_ab.py" "$out/${side}_$round.json" "${shapes[@]}")
  done
done
