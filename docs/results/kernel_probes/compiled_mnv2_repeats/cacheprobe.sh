#!/bin/bash
# compiled MobileNetV2 steps: bypass (fresh trace), cache cold (populates), cache warm (hits)
cd /work/main
export TORCHINDUCTOR_CACHE_DIR=/tmp/probe/icache
rm -rf /tmp/probe/icache
run() { # $1 label, $2 keepcache(0/1)
  python - "$1" "$2" <<'PY'
import runpy, sys
label, keep = sys.argv[1], sys.argv[2] == "1"
import evonorm_core.ops as o
if keep:
    o.bypass_autograd_cache = lambda: None
sys.argv = ["tools/benchmark_layers.py", "--shapes", "2x8x4x4", "--layers", "b0 (fused)", "--compiled-layers", "--no-timm",
            "--models", "mobilenet_v2", "--no-targets", "--plot", "", "--json", f"/tmp/probe/cache_{label}.json"]
runpy.run_path("tools/benchmark_layers.py", run_name="__main__")
PY
}
for label_keep in bypass1:0 cold:1 warm:1 bypass2:0 warm2:1; do
  label=${label_keep%%:*}; keep=${label_keep##*:}
  echo "== $label"; run $label $keep 2>&1 | grep "compiled)" 
done
