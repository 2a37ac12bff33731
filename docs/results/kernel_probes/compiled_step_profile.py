"""Where a compiled training step's time goes, by kind of work, for torchvision's MobileNetV2 (or ResNet-50)
converted to EvoNorm-B0 and with native BN-ReLU, NCHW and channels_last. A probe for docs/benchmarks.md
("Compiled MobileNetV2-B0: where the step's extra time goes"), not a benchmark: it reads the PyTorch profiler's
self CPU time of the step's calls (on the calling thread, so with two threads about wall time), with Inductor's
C++ kernels recorded one by one (TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE, set here before torch is imported;
the FX graph cache is off so the kernels are compiled with their profiling calls).

    python docs/results/kernel_probes/compiled_step_profile.py --json out.json mobilenet_v2

Batch 4 at 128 x 128 and two threads, as the benchmark's whole-model steps; the step times printed first are
medians of interleaved unprofiled steps, the breakdown is per step over --steps profiled ones.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
from collections import Counter
from pathlib import Path

os.environ["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] = "1"
os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

import torch  # noqa: E402  (after the environment Inductor reads at import)
from torch.profiler import ProfilerActivity, profile  # noqa: E402

BENCHMARK = Path(__file__).resolve().parents[3] / "tools" / "benchmark_layers.py"
BATCH, SIZE = 4, 128
LAYOUTS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def category(name: str) -> str:
    """The kind of work of a profiler event (its self time: the events it contains count in theirs)."""
    if "cpp_fused" in name:
        # Inductor names a kernel after the ATen ops it fuses: BatchNorm's (the native model's norm-acts, and
        # the B0 model's projection layers) or not (relayouts and gradients around the extern calls)
        return "inductor: batch_norm kernels" if "batch_norm" in name else "inductor: other kernels"
    if name.startswith("evonorm::"):
        return name
    if name in ("aten::convolution_backward", "aten::mkldnn_convolution"):
        return "convolutions"
    if name in ("aten::empty", "aten::empty_strided", "aten::copy_"):
        return name
    if name.startswith("Optimizer."):
        return "optimizer"
    if name.startswith("aten::"):
        return "aten: other ops"
    return "other (host)"


def profile_step(step, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Milliseconds per step and calls per step of each category."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    ms, calls = Counter(), Counter()
    for event in prof.key_averages():
        ms[category(event.key)] += event.self_cpu_time_total / 1e3 / steps
        calls[category(event.key)] += event.count / steps
    return dict(ms), dict(calls)


def run(arch: str, layout: str, steps: int, reps: int, bench: dict) -> dict:
    torch.manual_seed(0)
    models = bench["whole_models"](arch, torch.device("cpu"), LAYOUTS[layout])
    models = {name: models[name] for name in ("evonorm_b0", bench["BN_RELU"])}
    images = torch.randn(BATCH, 3, SIZE, SIZE).contiguous(memory_format=LAYOUTS[layout])
    labels = torch.randint(0, 1000, (BATCH,))
    train_steps, _ = bench["training_steps"](models, images, labels, "float32", True, lr=1e-3)
    times = bench["interleaved_times"](train_steps, reps, 2, torch.device("cpu"))
    result = {"arch": arch, "layout": layout, "step_ms": {n: statistics.median(t) * 1e3 for n, t in times.items()},
              "profiled_ms": {}, "calls": {}}
    for name, step in train_steps.items():
        result["profiled_ms"][name], result["calls"][name] = profile_step(step, steps)
    return result


def format_result(r: dict) -> str:
    (b0, ms_b0), (bn, ms_bn) = r["profiled_ms"].items()
    kinds = sorted(set(ms_b0) | set(ms_bn), key=lambda k: -abs(ms_b0.get(k, 0) - ms_bn.get(k, 0)))
    lines = [f"{r['arch']} {r['layout']}: step medians " + ", ".join(f"{n} {v:.2f} ms" for n, v in r["step_ms"].items()),
             f"  profiled, per step: {b0} {sum(ms_b0.values()):.2f} ms, {bn} {sum(ms_bn.values()):.2f} ms",
             f"  {'kind':32s} {b0:>18s} {bn:>18s} {'difference':>10s}"]
    for k in kinds:
        a, b = ms_b0.get(k, 0.0), ms_bn.get(k, 0.0)
        ca, cb = r["calls"][b0].get(k, 0), r["calls"][bn].get(k, 0)
        lines.append(f"  {k:32s} {a:8.2f} ms ({ca:4.0f}) {b:8.2f} ms ({cb:4.0f}) {a - b:+9.2f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archs", nargs="*", default=["mobilenet_v2"], help="torchvision models (default mobilenet_v2)")
    p.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS),
                   help="model and input memory layouts (default both)")
    p.add_argument("--steps", type=int, default=10, help="profiled steps per model (default 10)")
    p.add_argument("--reps", type=int, default=11, help="interleaved unprofiled steps per model (default 11)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    # tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
    bench = runpy.run_path(str(BENCHMARK), run_name="tools_benchmark_layers")
    assert bench["keep_freed_memory"](), "glibc's mallopt is needed for the benchmark's allocator setting"
    torch.set_num_threads(2)
    results = []
    for arch in args.archs:
        for layout in args.layouts:
            results.append(run(arch, layout, args.steps, args.reps, bench))
            print(format_result(results[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
