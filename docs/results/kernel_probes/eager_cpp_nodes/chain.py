"""The eager layers' fixed cost per call: fwd+bwd of a chain of 35 layers (MobileNetV2's count of activated
norm-acts) at a shape where the kernels have almost no work, per layer, for EvoNorm-S0 and -B0 entering through the
C++ autograd nodes (the eager entries on the CPU since 2026-12-01) and through the Python autograd functions (the
entries before, ``library.PYTHON_AUTOGRAD``), against GroupNorm + ReLU6 and BatchNorm + ReLU6; interleaved rounds,
one thread, medians; one JSON line.

    python docs/results/kernel_probes/eager_cpp_nodes/chain.py [NxCxHxW] >> chain.jsonl
"""
import json
import statistics
import sys
import time

import torch
from torch import nn

from evonorm_core.ops import library
from evonorm_core.registry import build_norm_act

LAYERS, ROUNDS, WARMUP = 35, 60, 10
CPP_NODES = {name: getattr(library, f"{name}_eager") for name in library.PYTHON_AUTOGRAD}


def chain(make) -> nn.Module:
    return nn.Sequential(*[make() for _ in range(LAYERS)])


def main(shape: tuple[int, ...]) -> None:
    torch.set_num_threads(1)
    c = shape[1]
    chains = {"s0": chain(lambda: build_norm_act("evonorm_s0", c)),
              "gn_relu6": chain(lambda: nn.Sequential(nn.GroupNorm(min(32, c), c), nn.ReLU6(inplace=True))),
              "b0": chain(lambda: build_norm_act("evonorm_b0", c)),
              "bn_relu6": chain(lambda: nn.Sequential(nn.BatchNorm2d(c), nn.ReLU6(inplace=True)))}
    x = torch.randn(shape, requires_grad=True)
    runs = [(name, entries) for name in chains for entries in
            ((CPP_NODES, library.PYTHON_AUTOGRAD) if name in ("s0", "b0") else (CPP_NODES,))]
    times: dict[str, list[float]] = {}
    for r in range(WARMUP + ROUNDS):
        for name, entries in runs:
            for op, entry in entries.items():
                setattr(library, f"{op}_eager", entry)
            key = name if name not in ("s0", "b0") else f"{name} {'cpp_node' if entries is CPP_NODES else 'python_function'}"
            start = time.perf_counter()
            chains[name](x).sum().backward()
            if r >= WARMUP:
                times.setdefault(key, []).append(time.perf_counter() - start)
    for op, entry in CPP_NODES.items():
        setattr(library, f"{op}_eager", entry)
    print(json.dumps({"shape": list(shape), "layers": LAYERS, "rounds": ROUNDS, "threads": 1,
                      "us_per_layer_fwd_bwd": {k: statistics.median(v) / LAYERS * 1e6 for k, v in times.items()}}))


if __name__ == "__main__":
    main(tuple(int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "4x32x4x4").split("x")))
