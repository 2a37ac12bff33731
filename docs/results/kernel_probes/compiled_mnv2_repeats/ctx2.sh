#!/bin/bash
cd /work/main
for i in 1 2; do
echo "== C$i: tiny layers, mobilenet_v2 only, heap"
python tools/benchmark_layers.py --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --no-timm --models mobilenet_v2 --no-targets --plot '' --json /tmp/probe/ctx_C$i.json 2>&1 | grep "compiled): evonorm_b0"
done
echo "== D: tiny layers, resnet50 + mobilenet_v2, system allocator"
python tools/benchmark_layers.py --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --no-timm --models resnet50 mobilenet_v2 --allocator system --no-targets --plot '' --json /tmp/probe/ctx_D.json 2>&1 | grep "compiled): evonorm_b0"
echo done
