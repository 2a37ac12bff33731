"""Per-call cost of the eager layers where the work is nothing (1x32x2x2: 128 values), from run{1,2,3}.json beside
this file, each written by

    python tools/benchmark_layers.py --shapes 1x32x2x2 --layers "s0 (fused)" gn_relu gn_silu --compiled-layers \\
        --no-timm --no-model --no-targets --reps 51 --json docs/results/kernel_probes/host_cost/run<i>.json --plot ''

and profile_host.txt, the cProfile breakdown of one such call (`--profile-host`, the same shape, JSON beside it).
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    for path in sorted(HERE.glob("run*.json")):
        ms = {r["layer"]: r["ms"] for r in json.loads(path.read_text())["layers"]}
        us = {name: round(value * 1000, 1) for name, value in ms.items()}
        extra = (ms["evonorm_s0 (fused)"] - ms["gn_relu (native)"]) * 1000
        print(f"{path.name}: fwd+bwd median us {us}; EvoNorm-S0 minus GN-ReLU {extra:.1f} us")


if __name__ == "__main__":
    main()
