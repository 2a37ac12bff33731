"""The compiled MobileNetV2-B0 / BN-ReLU step ratio of every run of 2026-11-29 (one build, 8ae713e's kernels or
its parent's, which the step does not reach: the change is in the S backward), in the order run, with what the run
had done before the step: the probe scripts beside this file (as run; their JSON copied here) and the two default
benchmark runs (docs/results/benchmark_layers_2026-11-29_avx512_parent.json and benchmark_layers.json).

    python docs/results/kernel_probes/compiled_mnv2_repeats/summary.py
"""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[1]
RUNS = [
    (RESULTS / "benchmark_layers_2026-11-29_avx512_parent.json", "default run (every layer and shape, ResNet-50 first)"),
    (RESULTS / "benchmark_layers.json", "default run (every layer and shape, ResNet-50 first)"),
    (HERE / "cache_bypass1.json", "cacheprobe.sh: one tiny layer, MobileNetV2 only, fresh Inductor cache dir, AOT cache off"),
    (HERE / "cache_cold.json", "cacheprobe.sh: the same, AOTAutograd cache on (populating it)"),
    (HERE / "cache_warm.json", "cacheprobe.sh: the same, AOTAutograd cache on (hits)"),
    (HERE / "cache_bypass2.json", "cacheprobe.sh: the same, AOT cache off"),
    (HERE / "cache_warm2.json", "cacheprobe.sh: the same, AOTAutograd cache on (hits)"),
    (HERE / "ctx_A.json", "ctxprobe.sh: one tiny layer, ResNet-50 then MobileNetV2"),
    (HERE / "ctx_B.json", "ctxprobe.sh: every layer and shape, MobileNetV2 only"),
    (HERE / "ctx_C1.json", "ctx2.sh: one tiny layer, MobileNetV2 only (default Inductor cache dir)"),
    (HERE / "ctx_C2.json", "ctx2.sh: the same"),
    (HERE / "ctx_D.json", "ctx2.sh: one tiny layer, ResNet-50 then MobileNetV2, --allocator system"),
    (HERE / "ctx_E1.json", "ctx3.sh: one tiny layer, MobileNetV2 only, fresh Inductor cache dir"),
    (HERE / "ctx_E2.json", "ctx3.sh: the same, another fresh dir"),
    (HERE / "ctx_F.json", "ctx3.sh: the same, E1's dir again (warm)"),
]


def main() -> None:
    ratios = []
    for path, what in RUNS:
        row = next(m for m in json.loads(path.read_text())["models"]
                   if m["label"] == "MobileNetV2" and m["compiled"] and "evonorm_b0" in m["pair"])
        ratios.append(row["ratio"])
        ms = row["ms"]
        print(f"{row['ratio']:.3f}x  (B0 {ms['evonorm_b0']:5.1f} ms, BN-ReLU {ms['bn_relu (native)']:5.1f} ms; rounds "
              f"{min(row['round_ratios']):.2f}-{max(row['round_ratios']):.2f})  {path.name}: {what}")
    above = sum(r > 1.0 for r in ratios)
    print(f"{len(ratios)} runs: median {statistics.median(ratios):.3f}x, range {min(ratios):.3f}-{max(ratios):.3f}x, "
          f"above 1.0x in {above}")


if __name__ == "__main__":
    main()
