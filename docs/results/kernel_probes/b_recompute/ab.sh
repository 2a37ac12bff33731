#!/usr/bin/env bash
# B0's fwd+bwd with the per-(n, c) statistics kept for the backward (main) against recomputed by it (the
# branch experiment/b-backward-recomputes-statistics), at ResNet-50's stage shapes, batch 16, NCHW and
# channels_last, two alternating rounds; every other job of the machine stopped.
#   git worktree add /tmp/recompute experiment/b-backward-recomputes-statistics
#   (cd /tmp/recompute && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/b_recompute/ab.sh /tmp/recompute
# Writes {saved,recomputed}[_cl]_{1,2}.json beside this script and prints summary.txt's lines.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
main="$(cd "$here/../../../.." && pwd)"
experiment="$(cd "$1" && pwd)"
for round in 1 2; do
  for side in saved recomputed; do
    for layout in "" "--channels-last"; do
      dir=$main; [ "$side" = recomputed ] && dir=$experiment
      (cd "$dir" && PYTHONPATH="$dir" python tools/benchmark_layers.py --layers "b0 (fused)" bn_relu $layout \
        --no-model --no-timm --no-targets --reps 11 --plot '' \
        --json "$here/${side}${layout:+_cl}_$round.json" > /dev/null)
    done
  done
done
python "$here/summary.py" "$here"
