"""A/B probe: the layout constraint Inductor applies to the ``evonorm`` operators in a compiled training step.

torch.compile on the CPU lays convolution outputs out channels_last. Without a layout tag on the ``evonorm``
operators (as before 2026-11-27) Inductor uses ``torch._functorch.config.custom_op_default_layout_constraint``
(``needs_fixed_stride_order``): each operator's input is restrided to the layout it had when traced
(NCHW) and its output back, two transposing copies per layer in the forward (``cpp_fused_b_forward_*``
kernels in ``TORCH_LOGS=output_code``) and more around the backward. ``flexible_layout`` (the operators'
tag since) passes Inductor's buffers as they are (the kernels take NCHW and channels_last alike); then the copies left
are the operator's own, where Inductor hands the backward a gradient in another layout than the
saved input (around MobileNetV2's depthwise convolutions).

One process per constraint (it is read when the graph is compiled; for ``needs_fixed_stride_order`` the probe
takes the tag off the operators in its own process), Inductor's caches off, glibc's malloc
keeping freed memory (as tools/benchmark_layers.py --allocator heap), the converted model's step and its
native model's interleaved, median of ``reps`` after 2 warm-up rounds. A probe, not a benchmark:

    for c in needs_fixed_stride_order flexible_layout needs_fixed_stride_order flexible_layout; do
        TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python docs/results/kernel_probes/custom_op_layout_ab.py \
            mobilenet_v2 evonorm_b0 $c 9
    done
"""
from __future__ import annotations

import ctypes
import math
import statistics
import sys
import time

import torch
import torch._functorch.config
import torch.nn.functional as F
import torchvision
from torch import nn

import evonorm_core

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def training_step(arch: str, layer: str, native: bool, x: torch.Tensor, y: torch.Tensor):
    """A compiled SGD step of torchvision's ``arch`` converted to ``layer``, or with ``native`` the layer it
    replaces (BN-ReLU for the B series, GN-ReLU for the S series)."""
    build = getattr(torchvision.models, arch)
    if not native:
        model = evonorm_core.convert_norm_act(build(), layer)
    elif layer.startswith("evonorm_b"):
        model = build()
    else:
        model = build(norm_layer=lambda c: nn.GroupNorm(math.gcd(32, c), c))
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    forward = torch.compile(model)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(forward(x), y).backward()
        optimizer.step()

    step()  # compiles
    return step


def main(arch: str, layer: str, constraint: str, reps: int) -> None:
    libc = ctypes.CDLL(None)
    assert libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    torch._functorch.config.custom_op_default_layout_constraint = constraint
    evonorm_core.ops.load("cpu")
    for packet in (torch.ops.evonorm.s_forward, torch.ops.evonorm.s_backward, torch.ops.evonorm.b_forward,
                   torch.ops.evonorm.b_backward):
        overload = packet.default  # a tag, where present, decides over the default: the probe's arm decides here
        overload._tags = [tag for tag in overload.tags if tag != torch.Tag.flexible_layout]
    torch.set_num_threads(2)
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
    steps = {"native": training_step(arch, layer, True, x, y), layer: training_step(arch, layer, False, x, y)}
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps.items())
    for rep in range(reps + 2):
        for name, step in order if rep % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            step()
            if rep >= 2:
                times[name].append(time.perf_counter() - start)
    ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(arch, layer, constraint, " ".join(f"{name} {v:.1f} ms" for name, v in ms.items()),
          f"ratio {ms[layer] / ms['native']:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
