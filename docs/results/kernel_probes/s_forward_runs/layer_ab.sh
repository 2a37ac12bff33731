#!/usr/bin/env bash
# The S layers against GN-SiLU (tools/benchmark_layers.py, 2 threads, 31 repetitions), forward + backward and
# inference alone, before (the tree given as $1, built in place) and after (this tree), three alternations, every
# other job of the machine stopped, at the shapes the change touches: ResNet-50's 7x7 stage at batch 16,
# MobileNetV2's 8x8 and 4x4 ones at batch 4. Writes {before,after}_{train,inference}_<round>.json beside this
# script; summary.py prints their ranges.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
declare -A flags=([train]="" [inference]="--inference")
for round in 1 2 3; do
  for pass in train inference; do
    for side in before after; do
      dir=$after; [ "$side" = before ] && dir=$before
      # shellcheck disable=SC2086  # an empty flag is no word
      (cd "$dir" && python tools/benchmark_layers.py --shapes 16x2048x7x7 4x1024x8x8 4x960x4x4 --layers "s0 (fused)" \
        "s1 (fused)" "s2 (fused)" gn_silu --no-timm --no-model --no-targets --reps 31 ${flags[$pass]} \
        --json "$here/${side}_${pass}_$round.json" --plot '') > /dev/null 2>&1
    done
  done
done
