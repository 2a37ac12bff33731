"""Census of the graphs torch.compile trains torchvision's MobileNetV2 with: ATen nodes per target in the
forward and backward graphs AOT autograd partitions (the min-cut partitioner Inductor uses), for the native
BN-ReLU model and the model converted to a layer of the suite. A probe for docs/benchmarks.md ("MobileNetV2
compiled with EvoNorm-B0"), not a benchmark: it counts nodes, it times nothing.

    python docs/results/kernel_probes/compiled_graph_census.py bn_relu evonorm_b0
"""
from __future__ import annotations

import collections
import sys

import torch
import torchvision
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

import evonorm_core


def census(layer: str) -> dict[str, collections.Counter]:
    """Node targets of the forward ("fw") and backward ("bw") graph of one MobileNetV2 training step."""
    counts: dict[str, collections.Counter] = {}

    def recorder(tag: str):
        def compiler(gm: torch.fx.GraphModule, example_inputs):
            counts[tag] = collections.Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
            return gm.forward
        return compiler

    backend = aot_autograd(fw_compiler=recorder("fw"), bw_compiler=recorder("bw"),
                           partition_fn=min_cut_rematerialization_partition)
    model = torchvision.models.mobilenet_v2(num_classes=10)
    if layer != "bn_relu":
        model = evonorm_core.convert_norm_act(model, layer)
    x, y = torch.randn(4, 3, 128, 128), torch.randint(0, 10, (4,))
    torch.compile(lambda: torch.nn.functional.cross_entropy(model(x), y).backward(), backend=backend)()
    return counts


def main(layers: list[str]) -> None:
    torch.manual_seed(0)
    for layer in layers:
        for tag, c in census(layer).items():
            print(f"{layer} {tag}: {sum(c.values())} nodes; {dict(c.most_common(12))}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["bn_relu", "evonorm_b0"])
