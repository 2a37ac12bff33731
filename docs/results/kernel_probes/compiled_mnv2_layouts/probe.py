"""Compiled MobileNetV2-B0's training step over compiled BN-ReLU's in three layout settings (batch 4, 128 px,
2 threads, 41 interleaved rounds after two warm-up rounds; tools/benchmark_layers.py's models, step, timing and
allocator setting). One JSON line per run.

    python docs/results/kernel_probes/compiled_mnv2_layouts/probe.py SETTING

SETTING: ``nchw`` (what the layer benchmark runs: NCHW models; Inductor's layout optimization, on by default on the
CPU, lays the graph out channels_last), ``nchw-no-layout-opt`` (the same with
``torch._inductor.config.layout_optimization = False``: the graph stays NCHW) or ``channels-last`` (models and
input channels_last before compiling).
"""
import json
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch._inductor.config

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))
SETTINGS = ("nchw", "nchw-no-layout-opt", "channels-last")

setting = sys.argv[1] if len(sys.argv) > 1 else "nchw"
if setting not in SETTINGS:
    sys.exit(f"SETTING must be one of {', '.join(SETTINGS)}; got {setting!r}")
torch._inductor.config.layout_optimization = setting != "nchw-no-layout-opt"
layout = torch.channels_last if setting == "channels-last" else torch.contiguous_format
bl.keep_freed_memory()
bl.ops.bypass_autograd_cache()  # compiled from this tree's operators, as the benchmark does
torch.set_num_threads(2)
torch.manual_seed(0)
built = bl.whole_models("mobilenet_v2", torch.device("cpu"), layout)
models = {"evonorm_b0": built["evonorm_b0"], "bn_relu": built["bn_relu (native)"]}
images = torch.randn(4, 3, 128, 128).contiguous(memory_format=layout)
labels = torch.randint(0, 1000, (4,))
steps, compile_s = bl.training_steps(models, images, labels, "float32", True, lr=1e-3)
times = bl.interleaved_times(steps, 41, 2, torch.device("cpu"))
ratios = [a / b for a, b in zip(times["evonorm_b0"], times["bn_relu"])]
print(json.dumps({"setting": setting, "ratio_median": statistics.median(ratios), "ratios": ratios,
                  "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "compile_s": compile_s}))
