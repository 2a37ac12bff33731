#!/usr/bin/env bash
# The backward operators reading an NCHW gradient of a channels_last x in transposed tiles (this tree) against a
# whole-tensor transposing copy first (before: the commit given as $1, built in place): the operators alone
# (grad_layout_op.py), the channels_last fused layers' fwd+bwd at MobileNetV2's and ResNet-50's shapes (the
# s_backward rows, restrict parameters, changed in the same commit), and the whole training steps, eager and
# compiled; alternating rounds, every other job of the machine stopped.
#   git worktree add --detach /tmp/before 03d0a1d && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/mixed_layout_grad/ab.sh /tmp/before
# Writes {before,after}_op.json, {before,after}_layers_{1,2}.json and {before,after}_steps_{1,2,3}.json beside
# this script and prints summary.txt's lines.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
shapes=(4x96x64x64 4x144x32x32 4x576x8x8 4x1280x4x4 16x256x56x56 16x512x28x28 16x1024x14x14 16x2048x7x7)
side_dir() { if [ "$1" = before ]; then echo "$before"; else echo "$after"; fi; }
for side in before after; do
  (cd "$(side_dir $side)" && PYTHONPATH=. python "$here/grad_layout_op.py" "$here/${side}_op.json" > /dev/null)
done
bench() {  # side, then benchmark_layers.py's arguments
  local dir; dir="$(side_dir "$1")"
  shift
  (cd "$dir" && PYTHONPATH="$dir" python tools/benchmark_layers.py --no-timm --no-targets --plot '' "$@" > /dev/null)
}
for round in 1 2; do
  for side in before after; do
    bench $side --shapes "${shapes[@]}" --channels-last --layers "s0 (fused)" "b0 (fused)" --compiled-layers \
      --no-model --reps 15 --json "$here/${side}_layers_$round.json"
  done
done
for round in 1 2 3; do
  for side in before after; do
    bench $side --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --models mobilenet_v2 resnet50 \
      --json "$here/${side}_steps_$round.json"
  done
done
python "$here/summary.py" "$here"
