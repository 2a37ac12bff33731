#!/bin/bash
# the whole-model steps at the layer table's batch (16) and ImageNet's 224 px, eager, three runs back to back,
# written to the folder given (default /tmp/b16, where the 2026-11-30 runs went)
set -euo pipefail
out="${1:-/tmp/b16}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # before the cd below: a relative folder is the caller's
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
for i in 1 2 3; do
  python tools/benchmark_layers.py --shapes 2x64x8x8 --reps 3 --layers "s0 (fused)" --no-timm --compiled-layers \
    --no-compiled-model --model-batch 16 --model-size 224 --model-reps 11 --no-targets \
    --json "$out/eager_run$i.json" --plot '' > "$out/eager_run$i.log" 2>&1
done
echo done > "$out/eager.done"
