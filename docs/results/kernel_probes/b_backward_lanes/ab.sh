#!/bin/bash
# The NCHW B backward on lanes (3dbcfd1) against the kernels before it (0315c52): three interleaved_ab.py runs per
# dtype, from the repository root, nothing else running; b_forward (unchanged code) beside it as a control.
set -e
here=docs/results/kernel_probes/b_backward_lanes
for run in 1 2 3; do
  for dtype in float32 bfloat16; do
    python docs/results/kernel_probes/interleaved_ab.py 0315c52 --dtype "$dtype" --ops b_backward,b_forward \
      --json "$here/ab_${dtype}_$run.json" \
      16x2048x7x7 2x2048x7x7 16x1024x14x14 4x576x8x8 4x960x4x4 4x512x4x4 16x64x16x16 2x320x3x5 16x512x28x28
  done
done
