"""A/B probe: the layout constraint Inductor applies to the ``evonorm`` operators in a compiled training step.

torch.compile on the CPU lays convolution outputs out channels_last. Without a layout tag on the ``evonorm``
operators (as before 2026-11-27) Inductor uses ``torch._functorch.config.custom_op_default_layout_constraint``
(``needs_fixed_stride_order``): each operator's input is restrided to the layout it had when traced
(NCHW) and its output back, two transposing copies per layer in the forward (``cpp_fused_b_forward_*``
kernels in ``TORCH_LOGS=output_code``) and more around the backward. ``flexible_layout`` (the operators'
tag since) passes Inductor's buffers as they are (the kernels take NCHW and channels_last alike); then the copies left
are the operator's own, where Inductor hands the backward a gradient in another layout than the
saved input (around MobileNetV2's depthwise convolutions).

One process per constraint (it is read when the graph is compiled; in both arms the probe takes the tag off the
operators in its own process and sets Inductor's default constraint to the arm's), Inductor's caches off. The models, the compiled SGD
step, the interleaved timing and the allocator setting are tools/benchmark_layers.py's (its whole-model
steps, ``--allocator heap``): the converted model's step and its native model's, median of ``reps`` after 2
warm-up rounds. A probe, not a benchmark:

    for c in needs_fixed_stride_order flexible_layout needs_fixed_stride_order flexible_layout; do
        TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python docs/results/kernel_probes/custom_op_layout_ab.py \
            mobilenet_v2 evonorm_b0 $c 9
    done
"""
from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import torch._functorch.config

import evonorm_core

BENCHMARK = Path(__file__).resolve().parents[3] / "tools" / "benchmark_layers.py"


def benchmark_layers():
    """tools/benchmark_layers.py, a script rather than a package module, loaded from its path."""
    spec = importlib.util.spec_from_file_location("tools_benchmark_layers", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main(arch: str, layer: str, constraint: str, reps: int) -> None:
    bench = benchmark_layers()
    assert bench.keep_freed_memory()
    torch._functorch.config.custom_op_default_layout_constraint = constraint
    evonorm_core.ops.load("cpu")
    for packet in (torch.ops.evonorm.s_forward, torch.ops.evonorm.s_backward, torch.ops.evonorm.b_forward,
                   torch.ops.evonorm.b_backward):
        overload = packet.default  # a tag, where present, decides over the default: the probe's arm decides here
        overload._tags = [tag for tag in overload.tags if tag != torch.Tag.flexible_layout]
    torch.set_num_threads(2)
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    native = bench.BN_RELU if layer.startswith("evonorm_b") else bench.GN_RELU
    models = bench.whole_models(arch, cpu, torch.contiguous_format)
    x, y = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
    steps, _ = bench.training_steps({"native": models[native], layer: models[layer]}, x, y, "float32",
                                    compiled=True, lr=1e-3)
    times = bench.interleaved_times(steps, reps, 2, cpu)
    ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(arch, layer, constraint, " ".join(f"{name} {v:.1f} ms" for name, v in ms.items()),
          f"ratio {ms[layer] / ms['native']:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
