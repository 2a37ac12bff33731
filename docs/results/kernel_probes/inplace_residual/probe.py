"""What recording ``out += identity`` in place saves a converted ResNet-50's eager training step: the benchmark's
models (tools/benchmark_layers.py: batch 4, 128 px, SGD, 2 threads, glibc malloc keeping freed memory), each
EvoNorm model as convert_norm_act now builds it (the residual adds in place, as torchvision's code does) and the
same graph with those adds made ``operator.add`` (a new tensor per block: the converter before), stepped in
interleaved rounds with the native GN-ReLU and BN-ReLU models; one JSON line (median per-round step ratios).

    python docs/results/kernel_probes/inplace_residual/probe.py [ROUNDS]
"""
import copy
import json
import operator
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))


def out_of_place(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``model`` whose in-place additions return new tensors."""
    model = copy.deepcopy(model)
    for node in model.graph.nodes:
        if node.target is operator.iadd:
            node.target = operator.add
    model.recompile()
    return model


def main(rounds: int) -> None:
    bl.keep_freed_memory()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    built = bl.whole_models("resnet50", torch.device("cpu"), torch.contiguous_format)
    models = {"evonorm_s0": built["evonorm_s0"], "evonorm_s0 out of place": out_of_place(built["evonorm_s0"]),
              bl.GN_RELU: built[bl.GN_RELU], "evonorm_b0": built["evonorm_b0"],
              "evonorm_b0 out of place": out_of_place(built["evonorm_b0"]), bl.BN_RELU: built[bl.BN_RELU]}
    images = torch.randn(4, 3, 128, 128)
    labels = torch.randint(0, 1000, (4,))
    steps, _ = bl.training_steps(models, images, labels, "float32", False, lr=1e-3)
    times = bl.interleaved_times(steps, rounds, 1, torch.device("cpu"))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    print(json.dumps({
        "rounds": rounds, "torch": torch.__version__,
        "median_ms": {n: round(statistics.median(t) * 1e3, 2) for n, t in times.items()},
        "ratios": {f"{a} / {b}": round(ratio(a, b), 4) for a, b in (
            ("evonorm_s0", "evonorm_s0 out of place"), ("evonorm_s0", bl.GN_RELU),
            ("evonorm_s0 out of place", bl.GN_RELU), ("evonorm_b0", "evonorm_b0 out of place"),
            ("evonorm_b0", bl.BN_RELU), ("evonorm_b0 out of place", bl.BN_RELU))},
        "peak_mb": {n: round(bl.peak_step_bytes(s, torch.device("cpu")) / 2**20, 2) for n, s in steps.items()},
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
