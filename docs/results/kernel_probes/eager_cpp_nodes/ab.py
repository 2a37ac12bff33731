"""Eager EvoNorm-S0 and -B0 training steps with the operators' autograd nodes in C++ (``evonorm::<op>_autograd``, the
eager entries on the CPU since 2026-12-01) against the same models through the Python autograd functions
(``library.PYTHON_AUTOGRAD``, the entries before), and native GN-ReLU / BN-ReLU: tools/benchmark_layers.py's models
and step (batch 4, 128 px, SGD, 2 threads, glibc malloc keeping freed memory), stepped in interleaved rounds in one
process; one JSON line per model and series (medians over rounds of each round's step-time ratios).

    python docs/results/kernel_probes/s_cpp_autograd/ab.py [ROUNDS] >> runs.jsonl
"""
import copy
import json
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from evonorm_core.ops import library

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))
CPP_NODES = {name: getattr(library, f"{name}_eager") for name in library.PYTHON_AUTOGRAD}


def entered_through(step, entries: dict):
    """``step`` with the eager layers entering through ``entries`` (operator name -> entry point)."""
    def run() -> None:
        for name, entry in entries.items():
            setattr(library, f"{name}_eager", entry)
        step()

    return run


def main(rounds: int) -> None:
    bl.keep_freed_memory()
    torch.set_num_threads(2)
    for arch in ("resnet50", "mobilenet_v2"):
        torch.manual_seed(0)
        built = bl.whole_models(arch, torch.device("cpu"), torch.contiguous_format)
        for evonorm, native in (("evonorm_s0", bl.GN_RELU), ("evonorm_b0", bl.BN_RELU)):
            models = {"cpp_node": built[evonorm], "python_function": copy.deepcopy(built[evonorm]),
                      "native": built[native]}
            images, labels = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
            steps, _ = bl.training_steps(models, images, labels, "float32", False, lr=1e-3)
            steps = {name: entered_through(step, library.PYTHON_AUTOGRAD if name == "python_function" else CPP_NODES)
                     for name, step in steps.items()}
            times = bl.interleaved_times(steps, rounds, 2, torch.device("cpu"))
            entered_through(lambda: None, CPP_NODES)()

            def ratio(a: str, b: str) -> float:
                return statistics.median(x / y for x, y in zip(times[a], times[b]))

            print(json.dumps({"model": arch, "layer": evonorm, "native": native, "rounds": rounds,
                              "cpp_node_over_native": ratio("cpp_node", "native"),
                              "python_function_over_native": ratio("python_function", "native"),
                              "cpp_node_over_python_function": ratio("cpp_node", "python_function"),
                              "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
