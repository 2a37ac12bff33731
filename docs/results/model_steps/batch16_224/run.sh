#!/bin/bash
# the whole-model steps at the layer table's batch (16) and ImageNet's 224 px, eager, three runs back to back,
# written to the folder given (default /tmp/b16, where the 2026-11-30 runs went) as eager_run<i>.json; given a
# second tree (built in place), three alternating rounds of that tree ("before") and this one ("after"), each side
# importing its own tree, as ab_{before,after}_<i>.json
set -euo pipefail
out="${1:-/tmp/b16}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # before the cd below: a relative folder is the caller's
after="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
before="${2:+$(cd "$2" && pwd)}"
step() {  # tree, output name
  (cd "$1" && PYTHONPATH="$1" python tools/benchmark_layers.py --shapes 2x64x8x8 --reps 3 --layers "s0 (fused)" \
    --no-timm --compiled-layers --no-compiled-model --model-batch 16 --model-size 224 --model-reps 11 --no-targets \
    --json "$out/$2.json" --plot '' > "$out/$2.log" 2>&1)
}
for i in 1 2 3; do
  if [ -n "$before" ]; then
    step "$before" "ab_before_$i"
    step "$after" "ab_after_$i"
  else
    step "$after" "eager_run$i"
  fi
done
echo done > "$out/eager.done"
