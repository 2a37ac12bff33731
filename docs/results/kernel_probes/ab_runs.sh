#!/bin/bash
# Three interleaved_ab.py runs per dtype (float32, bfloat16) of the operators OPS against BEFORE at the B series'
# probe shapes, each run's JSON written into FOLDER as ab_<dtype>_<run>.json. From the repository root, nothing else
# running:
#   bash docs/results/kernel_probes/ab_runs.sh BEFORE OPS FOLDER
set -e
before=$1 ops=$2 folder=$3
for run in 1 2 3; do
  for dtype in float32 bfloat16; do
    python docs/results/kernel_probes/interleaved_ab.py "$before" --dtype "$dtype" --ops "$ops" \
      --json "$folder/ab_${dtype}_$run.json" \
      16x2048x7x7 2x2048x7x7 16x1024x14x14 4x576x8x8 4x960x4x4 4x512x4x4 16x64x16x16 2x320x3x5 16x512x28x28
  done
done
