#!/usr/bin/env bash
# The S layers against GN-SiLU (tools/benchmark_layers.py, 2 threads, 31 repetitions), forward + backward and
# inference alone, before (the tree given as $1, built in place) and after (this tree), three alternations, every
# other job of the machine stopped, at the shapes the change touches: ResNet-50's 7x7 stage at batch 16,
# MobileNetV2's 8x8 and 4x4 ones at batch 4. Writes {before,after}_{train,inference}_<round>.json beside this
# script; summary.py prints their ranges. A later probe sets other shapes (SHAPES, space-separated) and another
# folder (OUT). PYTHONPATH makes each side import its own tree: without it (the runs of 2026-11-30 07:00 UTC) both
# imported the installed one, and both sides of those runs timed the same kernels (docs/benchmarks.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
read -r -a shapes <<< "${SHAPES:-16x2048x7x7 4x1024x8x8 4x960x4x4}"
out="$(cd "${OUT:-$here}" && pwd)"
declare -A flags=([train]="" [inference]="--inference")
for round in 1 2 3; do
  for pass in train inference; do
    for side in before after; do
      dir=$after; [ "$side" = before ] && dir=$before
      # shellcheck disable=SC2086  # an empty flag is no word
      (cd "$dir" && PYTHONPATH="$dir" python tools/benchmark_layers.py --shapes "${shapes[@]}" --layers "s0 (fused)" \
        "s1 (fused)" "s2 (fused)" gn_silu --no-timm --no-model --no-targets --reps 31 ${flags[$pass]} \
        --json "$out/${side}_${pass}_$round.json" --plot '') > /dev/null 2>&1
    done
  done
done
