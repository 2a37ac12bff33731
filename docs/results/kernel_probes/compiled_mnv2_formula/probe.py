"""Compiled MobileNetV2-B0's training step over compiled BN-ReLU's (batch 4, 128 px, NCHW, 2 threads, 11
interleaved rounds after one warm-up), with the suite's choice under torch.compile (``operator``: the registered
operator from 16K elements, functional.COMPILED_OPERATOR_MIN_NUMEL) or the composed formula in every layer
(``formula``), which Inductor fuses into its own kernels. One JSON line per run.

    python docs/results/kernel_probes/compiled_mnv2_formula/probe.py {operator,formula}
"""
import json
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

import evonorm_core.functional as fn

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))

mode = sys.argv[1] if len(sys.argv) > 1 else "operator"
if mode not in ("operator", "formula"):
    sys.exit(f"mode must be 'operator' or 'formula', got {mode!r}")
if mode == "formula":
    fn.COMPILED_OPERATOR_MIN_NUMEL["cpu"] = 10**12
bl.keep_freed_memory()
torch.set_num_threads(2)
torch.manual_seed(0)
built = bl.whole_models("mobilenet_v2", torch.device("cpu"), torch.contiguous_format)
models = {"evonorm_b0": built["evonorm_b0"], "bn_relu": built["bn_relu (native)"]}
images, labels = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
steps, compile_s = bl.training_steps(models, images, labels, "float32", True, lr=1e-3)
times = bl.interleaved_times(steps, 11, 1, torch.device("cpu"))
ratios = [a / b for a, b in zip(times["evonorm_b0"], times["bn_relu"])]
print(json.dumps({"mode": mode, "ratio_median": statistics.median(ratios), "ratios": ratios,
                  "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "compile_s": compile_s}))
