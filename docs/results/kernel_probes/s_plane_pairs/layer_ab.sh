#!/usr/bin/env bash
# The S layers' fwd+bwd against GN-SiLU (tools/benchmark_layers.py, 2 threads) before (the tree given as $1, built
# in place) and after (this tree), three alternations a set, every other job of the machine stopped: the small set
# (ResNet-50's 7x7 stage at batch 16, MobileNetV2's 8x8 one at batch 4, 31 repetitions), then the large set (the
# other ResNet-50 stages, 21). Writes {before,after}_{small,large}_<round>.json beside this script.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
declare -A shapes=([small]="16x2048x7x7 4x1024x8x8" [large]="16x256x56x56 16x512x28x28 16x1024x14x14")
declare -A reps=([small]=31 [large]=21)
for set in small large; do
  for round in 1 2 3; do
    for side in before after; do
      dir=$after; [ "$side" = before ] && dir=$before
      # shellcheck disable=SC2086  # the shapes are words
      (cd "$dir" && python tools/benchmark_layers.py --shapes ${shapes[$set]} --layers "s0 (fused)" "s1 (fused)" \
        "s2 (fused)" gn_silu --compiled-layers --no-timm --no-model --no-targets --reps "${reps[$set]}" \
        --json "$here/${side}_${set}_$round.json" --plot '') > /dev/null 2>&1
    done
  done
done
