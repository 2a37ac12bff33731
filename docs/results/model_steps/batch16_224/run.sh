#!/bin/bash
# the whole-model steps at the layer table's batch (16) and ImageNet's 224 px, eager, three runs back to back
cd /work/main
for i in 1 2 3; do
  python tools/benchmark_layers.py --shapes 2x64x8x8 --reps 3 --layers "s0 (fused)" --no-timm --compiled-layers \
    --no-compiled-model --model-batch 16 --model-size 224 --model-reps 11 --no-targets \
    --json /tmp/b16/eager_run$i.json --plot '' > /tmp/b16/eager_run$i.log 2>&1
done
echo done > /tmp/b16/eager.done
