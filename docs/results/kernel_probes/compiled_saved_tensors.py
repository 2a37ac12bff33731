"""What a compiled training step keeps for its backward, by kind of tensor, for torchvision's MobileNetV2 or
ResNet-50 converted to EvoNorm-B0 and with native BN-ReLU, beside the step's peak memory as
tools/benchmark_layers.py reads it (``peak_step_bytes``). A probe for docs/benchmarks.md ("Compiled B0's peak
memory"), not a benchmark: allocations on the CPU are deterministic, it times nothing.

    python docs/results/kernel_probes/compiled_saved_tensors.py mobilenet_v2 resnet50

Batch 4 at 128 x 128, as the benchmark's whole-model steps; one thread.
"""
from __future__ import annotations

import runpy
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from evonorm_core import ops

BENCHMARK = Path(__file__).resolve().parents[3] / "tools" / "benchmark_layers.py"
BATCH, SIZE = 4, 128


def kind_of(t: Tensor) -> str:
    if t.dim() == 4:
        return "activations (N, C, H, W)"
    if t.dim() == 2 and t.shape[0] == BATCH:
        return "per sample (N, ...)"
    if t.dim() == 1:
        return "per channel (C)"
    return "other (weights)"


def saved_by_kind(forward, images: Tensor) -> Counter:
    """MiB of the distinct tensors autograd keeps for the backward of ``forward(images)``, by kind."""
    seen: dict[tuple[int, int], None] = {}
    kinds: Counter = Counter()

    def pack(t: Tensor) -> Tensor:
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key not in seen:
            seen[key] = None
            kinds[kind_of(t)] += t.numel() * t.element_size() / 2**20
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward(images)
    return kinds


def main(archs: list[str]) -> None:
    # tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
    bench = runpy.run_path(str(BENCHMARK), run_name="tools_benchmark_layers")
    torch.set_num_threads(1)
    ops.bypass_autograd_cache()  # a cached graph would keep what an earlier setup_context saved
    for arch in archs:
        torch.manual_seed(0)
        models = bench["whole_models"](arch, torch.device("cpu"), torch.contiguous_format)
        images, labels = torch.randn(BATCH, 3, SIZE, SIZE), torch.randint(0, 1000, (BATCH,))
        for name in ("evonorm_b0", bench["BN_RELU"]):
            model, compiled = models[name], torch.compile(models[name])

            def step() -> None:
                F.cross_entropy(compiled(images), labels).backward()
                model.zero_grad(set_to_none=True)

            step()  # compiles
            kinds = saved_by_kind(compiled, images)
            peak = bench["peak_step_bytes"](step, torch.device("cpu")) / 2**20
            parts = ", ".join(f"{kind} {mib:.3f}" for kind, mib in sorted(kinds.items()))
            print(f"{arch} {name}: peak {peak:.3f} MiB; saved for backward {sum(kinds.values()):.3f} MiB ({parts})",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mobilenet_v2"])
