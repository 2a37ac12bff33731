"""Compiled MobileNetV2-B0's training step over compiled BN-ReLU's in three layout settings (batch 4, 128 px,
2 threads, 41 interleaved rounds after two warm-up rounds; tools/benchmark_layers.py's models, step, timing and
allocator setting). One JSON line per run.

    python docs/results/kernel_probes/compiled_mnv2_layouts/probe.py SETTING [ARCH]

SETTING: ``nchw`` (what the layer benchmark runs: NCHW models; Inductor's layout optimization, on by default on the
CPU, lays the graph out channels_last), ``nchw-no-layout-opt`` (the same with
``torch._inductor.config.layout_optimization = False``: the graph stays NCHW) or ``channels-last`` (models and
input channels_last before compiling). ARCH: ``mobilenet_v2`` (default) or ``resnet50``, the same step for
ResNet-50.
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
ARCHS = ("mobilenet_v2", "resnet50")


def compiled_steps(setting: str, arch: str = "mobilenet_v2") -> tuple[dict, dict]:
    """The compiled training steps of ``arch`` with EvoNorm-B0 and with BN-ReLU (``evonorm_b0``, ``bn_relu``) in
    ``setting``, and their compile seconds; 2 threads and the benchmark's allocator setting for the process."""
    torch._inductor.config.layout_optimization = setting != "nchw-no-layout-opt"
    layout = torch.channels_last if setting == "channels-last" else torch.contiguous_format
    bl.keep_freed_memory()
    bl.ops.bypass_autograd_cache()  # compiled from this tree's operators, as the benchmark does
    torch.set_num_threads(2)
    torch.manual_seed(0)
    built = bl.whole_models(arch, torch.device("cpu"), layout)
    models = {"evonorm_b0": built["evonorm_b0"], "bn_relu": built["bn_relu (native)"]}
    images = torch.randn(4, 3, 128, 128).contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (4,))
    return bl.training_steps(models, images, labels, "float32", True, lr=1e-3)


def main() -> None:
    setting = sys.argv[1] if len(sys.argv) > 1 else "nchw"
    arch = sys.argv[2] if len(sys.argv) > 2 else "mobilenet_v2"
    if setting not in SETTINGS:
        sys.exit(f"SETTING must be one of {', '.join(SETTINGS)}; got {setting!r}")
    if arch not in ARCHS:
        sys.exit(f"ARCH must be one of {', '.join(ARCHS)}; got {arch!r}")
    steps, compile_s = compiled_steps(setting, arch)
    times = bl.interleaved_times(steps, 41, 2, torch.device("cpu"))
    ratios = [a / b for a, b in zip(times["evonorm_b0"], times["bn_relu"])]
    print(json.dumps({"setting": setting, "arch": arch, "ratio_median": statistics.median(ratios), "ratios": ratios,
                      "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "compile_s": compile_s}))


if __name__ == "__main__":
    main()
