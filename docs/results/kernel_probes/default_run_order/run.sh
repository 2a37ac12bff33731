#!/bin/bash
# B0 at 16x2048x7x7 in the default run's rounds (every eager layer: composed references and timm's layers included)
# and in rounds of the native and fused layers alone; twice each, from the repository root, nothing else running.
set -e
here=docs/results/kernel_probes/default_run_order
for run in 1 2; do
  python tools/benchmark_layers.py --shapes 16x2048x7x7 --no-model --no-targets --compiled-layers \
    --json "$here/all_$run.json" --plot "/tmp/all_$run.png"
  python tools/benchmark_layers.py --shapes 16x2048x7x7 --no-model --no-targets --compiled-layers --no-timm \
    --layers native fused --json "$here/native_and_fused_$run.json" --plot "/tmp/native_and_fused_$run.png"
done
