#!/bin/bash
# Variants tried and not kept, each timed against the kept kernels (ratio = kept / variant), from the repository
# root: the patch applied to a copy of the kernels' source, which interleaved_ab.py builds as BEFORE.
set -e
here=docs/results/kernel_probes/b_inference_lanes
for variant in integer_store store_permute; do
  cp evonorm_core/ops/csrc/evonorm_ops.cpp "/tmp/$variant.cpp"
  patch -s "/tmp/$variant.cpp" "$here/$variant.patch"
  python docs/results/kernel_probes/interleaved_ab.py "/tmp/$variant.cpp" --dtype bfloat16 \
    --ops b_inference,s_forward,s_backward --json "$here/tried_${variant}_bfloat16.json" \
    16x2048x7x7 4x576x8x8 16x1024x14x14 16x256x56x56
done
