"""Compiled MobileNetV2-B0's training step over compiled BN-ReLU's (NCHW, 2 threads, 11 interleaved rounds after
one warm-up; batch 4 and 128 px as the default benchmark unless given), with the suite's choice under
torch.compile (``operator``: the registered operator from 16K elements, functional.COMPILED_OPERATOR_MIN_NUMEL) or
the composed formula in every layer (``formula``), which Inductor fuses into its own kernels. One JSON line per
run: the median over rounds of each round's ratio, the steps' medians, their peak memory (MiB, as the benchmark
reads it) and compile times.

    python docs/results/kernel_probes/compiled_mnv2_formula/probe.py {operator,formula} [--batch N] [--size PX]
"""
import argparse
import json
import runpy
import statistics
from pathlib import Path
from types import SimpleNamespace

import torch

import evonorm_core.functional as fn
from evonorm_core import ops

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("mode", nargs="?", default="operator", choices=["operator", "formula"],
               help="the suite's choice under torch.compile, or the composed formula in every layer")
p.add_argument("--batch", type=int, default=4, help="images a step (default 4, the benchmark's)")
p.add_argument("--size", type=int, default=128, help="image side in pixels (default 128, the benchmark's)")
args = p.parse_args()
if args.mode == "formula":
    fn.COMPILED_OPERATOR_MIN_NUMEL["cpu"] = 10**12
ops.bypass_autograd_cache()  # as the benchmark: this tree's operators, not a cached graph of earlier ones
bl.keep_freed_memory()
torch.set_num_threads(2)
torch.manual_seed(0)
built = bl.whole_models("mobilenet_v2", torch.device("cpu"), torch.contiguous_format)
models = {"evonorm_b0": built["evonorm_b0"], "bn_relu": built["bn_relu (native)"]}
images, labels = torch.randn(args.batch, 3, args.size, args.size), torch.randint(0, 1000, (args.batch,))
steps, compile_s = bl.training_steps(models, images, labels, "float32", True, lr=1e-3)
times = bl.interleaved_times(steps, 11, 1, torch.device("cpu"))
ratios = [a / b for a, b in zip(times["evonorm_b0"], times["bn_relu"])]
peaks = {k: bl.peak_step_bytes(step, torch.device("cpu")) / 2**20 for k, step in steps.items()}
print(json.dumps({"mode": args.mode, "batch": args.batch, "size": args.size,
                  "ratio_median": statistics.median(ratios), "ratios": ratios,
                  "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "peak_mib": peaks,
                  "peak_ratio": peaks["evonorm_b0"] / peaks["bn_relu"], "compile_s": compile_s}))
