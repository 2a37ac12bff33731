#!/usr/bin/env bash
# The S series' fwd+bwd with the per-plane backward (before: the commit given as $1, built in place) against the
# small-plane backward of this tree, at MobileNetV2's layer shapes (batch 4, 128 px) and ResNet-50's 7x7 stage,
# then the whole eager training steps of MobileNetV2 and ResNet-50; alternating rounds, every other job of the
# machine stopped.
#   git worktree add --detach /tmp/before 2f3ce9b && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/s_small_planes/ab.sh /tmp/before
# Writes {before,after}_layers_{1,2}.json and {before,after}_steps_{1,2,3}.json beside this script and prints
# summary.txt's lines.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
shapes=(4x32x64x64 4x96x64x64 4x144x32x32 4x192x16x16 4x384x8x8 4x576x8x8 4x960x4x4 4x1280x4x4
        16x512x7x7 16x2048x7x7 2x2048x7x7)
bench() {  # side, then benchmark_layers.py's arguments
  local dir=$after; [ "$1" = before ] && dir=$before
  shift
  (cd "$dir" && PYTHONPATH="$dir" python tools/benchmark_layers.py --no-timm --no-targets --plot '' "$@" > /dev/null)
}
for round in 1 2; do
  for side in before after; do
    bench $side --shapes "${shapes[@]}" --layers "s0 (fused)" "s2 (fused)" --no-model --reps 21 \
      --json "$here/${side}_layers_$round.json"
  done
done
for round in 1 2 3; do
  for side in before after; do
    bench $side --shapes 2x8x4x4 --compiled-layers --no-compiled-model --models mobilenet_v2 resnet50 \
      --json "$here/${side}_steps_$round.json"
  done
done
python "$here/summary.py" "$here"
