#!/usr/bin/env bash
# The channels_last B backward with its sums written in place (9cd15d7) against 2913dc0, interleaved in one process
# (../interleaved_ab.py, 31 pairs a cell): three runs of float32 channels_last, one of bfloat16 channels_last and one
# of float32 NCHW (a path the change does not touch). Run from the repository root with nothing else running.
set -euo pipefail
D=docs/results/kernel_probes/cl_b_backward_sums
AB=docs/results/kernel_probes/interleaved_ab.py
SHAPES="4x960x4x4 4x1280x4x4 4x384x8x8 4x576x8x8 4x192x16x16 4x144x32x32 4x96x64x64 16x256x56x56 16x512x28x28 16x1024x14x14 16x2048x7x7 2x2048x7x7"
for run in 1 2 3; do
    python "$AB" 2913dc0 --channels-last --reps 31 --ops b_backward --json "$D/channels_last_float32_$run.json" $SHAPES
done
python "$AB" 2913dc0 --channels-last --dtype bfloat16 --reps 31 --ops b_backward --json "$D/channels_last_bfloat16.json" $SHAPES
python "$AB" 2913dc0 --reps 31 --ops b_backward --json "$D/nchw_float32.json" $SHAPES
