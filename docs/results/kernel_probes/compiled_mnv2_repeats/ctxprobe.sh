#!/bin/bash
cd /work/main
echo "== A: tiny layers, models resnet50 + mobilenet_v2"
python tools/benchmark_layers.py --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --no-timm --models resnet50 mobilenet_v2 --no-targets --plot '' --json /tmp/probe/ctx_A.json 2>&1 | grep "compiled)"
echo "== B: default layers, model mobilenet_v2 only"
python tools/benchmark_layers.py --models mobilenet_v2 --no-targets --plot '' --json /tmp/probe/ctx_B.json 2>&1 | grep "compiled)"
echo done
