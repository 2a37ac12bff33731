#!/bin/bash
cd /work/main
for i in 1 2; do
rm -rf /tmp/probe/icache$i
echo "== E$i: tiny layers, mobilenet_v2 only, fresh TORCHINDUCTOR_CACHE_DIR"
TORCHINDUCTOR_CACHE_DIR=/tmp/probe/icache$i python tools/benchmark_layers.py --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --no-timm --models mobilenet_v2 --no-targets --plot '' --json /tmp/probe/ctx_E$i.json 2>&1 | grep "compiled): evonorm_b0"
done
echo "== F: again in icache1 (warm)"
TORCHINDUCTOR_CACHE_DIR=/tmp/probe/icache1 python tools/benchmark_layers.py --shapes 2x8x4x4 --layers "b0 (fused)" --compiled-layers --no-timm --models mobilenet_v2 --no-targets --plot '' --json /tmp/probe/ctx_F.json 2>&1 | grep "compiled): evonorm_b0"
echo done
