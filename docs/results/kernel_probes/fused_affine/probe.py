"""The EvoNorm layers without a nonlinearity (``x * gamma + beta``) as the fused ``affine_forward`` operator against
the eval-mode ``F.batch_norm`` they ran as before (``impl="reference"`` on those layers alone), in the benchmark's
whole-model training steps (tools/benchmark_layers.py: batch 4, 128 px, SGD, 2 threads, glibc malloc keeping freed
memory): ResNet-50 and MobileNetV2 converted to EvoNorm-S0 and to B0, each beside its native baseline (GN-ReLU,
BN-ReLU), stepped in interleaved rounds, with a second copy of the fused model as the control (an A/A pair: what
the method reads between two identical models). One JSON line per model and series: the median per-round ratio of
each model's step to the baseline's, of the fused affine's step to the batch-norm affine's (the paired A/B) and to
its own copy's (the control). Every EvoNorm model is a deep copy of one converted model, built the same way.

Then the layers alone (``functional.affine`` fused and reference, fwd+bwd of a dense upstream gradient, median of
ROUNDS interleaved calls, us) at ResNet-50's batch-16 stage shapes and the batch-4 shapes of the step, one JSON line
per shape.

    python docs/results/kernel_probes/fused_affine/probe.py [ROUNDS]
"""
import copy
import json
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from evonorm_core import functional
from evonorm_core.layers.evonorm import EvoNormB0, EvoNormS0

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))
BASELINES = {"s": "gn_relu (native)", "b": "bn_relu (native)"}
LAYER_SHAPES = [(16, 256, 56, 56), (16, 512, 28, 28), (16, 1024, 14, 14), (16, 2048, 7, 7), (4, 256, 32, 32),
                (4, 512, 16, 16), (4, 1024, 8, 8), (4, 2048, 4, 4)]


def copy_with_affine(model: torch.nn.Module, impl: str) -> torch.nn.Module:
    """A copy whose layers without a nonlinearity run their affine with ``impl`` ("reference": the eval-mode batch
    norm)."""
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, (EvoNormS0, EvoNormB0)) and not module.nonlinearity:
            module.impl = impl
    return model


def measure(arch: str, series: str, rounds: int) -> dict:
    torch.manual_seed(0)
    built = bl.whole_models(arch, torch.device("cpu"), torch.contiguous_format)
    fused = built[f"evonorm_{series}0"]
    models = {"fused_affine": copy_with_affine(fused, "fused"), "fused_affine_again": copy_with_affine(fused, "fused"),
              "batch_norm_affine": copy_with_affine(fused, "reference"), "baseline": built[BASELINES[series]]}
    images, labels = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
    steps, _ = bl.training_steps(models, images, labels, "float32", False, lr=1e-3)
    times = bl.interleaved_times(steps, rounds, 2, torch.device("cpu"))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    return {"model": arch, "series": series, "rounds": rounds, "baseline": BASELINES[series],
            "ratio_to_baseline": {name: ratio(name, "baseline") for name in models},
            "fused_over_batch_norm_affine": ratio("fused_affine", "batch_norm_affine"),
            "fused_over_its_copy": ratio("fused_affine", "fused_affine_again"),
            "median_ms": {name: statistics.median(t) * 1e3 for name, t in times.items()}}


def measure_layer(shape: tuple[int, ...], rounds: int) -> dict:
    x, grad = torch.randn(shape, requires_grad=True), torch.randn(shape)
    weight, bias = torch.randn(shape[1], requires_grad=True), torch.randn(shape[1], requires_grad=True)

    def step(impl: str):
        return lambda: functional.affine(x, weight, bias, impl=impl).backward(grad)

    times = bl.interleaved_times({impl: step(impl) for impl in ("fused", "reference")}, rounds, 2, torch.device("cpu"))
    medians = {impl: statistics.median(t) * 1e6 for impl, t in times.items()}
    return {"shape": list(shape), "median_us": medians, "fused_over_reference": medians["fused"] / medians["reference"]}


def main(rounds: int) -> None:
    bl.keep_freed_memory()
    torch.set_num_threads(2)
    for arch in ("resnet50", "mobilenet_v2"):
        for series in ("s", "b"):
            print(json.dumps(measure(arch, series, rounds)), flush=True)
    for shape in LAYER_SHAPES:
        print(json.dumps(measure_layer(shape, rounds)), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 41)
