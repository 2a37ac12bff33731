"""The EvoNorm layers without a nonlinearity (``x * gamma + beta``: an eval-mode ``F.batch_norm``) in the place
they have in ResNet-50's bottleneck: 1x1 conv -> norm -> + identity -> ReLU, fwd+bwd, at the batch-4, 128 px
shapes of the benchmark's training step, against the same block with native GroupNorm, with ``torch.batch_norm``
called directly (no Python checks, zeros/ones kept as buffers) and with no norm at all. Median of 7 rounds of the
median of 41 calls each, ms; one JSON line.

    python docs/results/kernel_probes/affine_in_block/probe.py
"""
import json
import runpy
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from evonorm_core.layers import EvoNormS0

BENCHMARK = Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"
SHAPES = [(4, 256, 32, 32), (4, 512, 16, 16), (4, 1024, 8, 8), (4, 2048, 4, 4)]


class DirectBatchNorm(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("zeros", torch.zeros(channels))
        self.register_buffer("ones", torch.ones(channels))

    def forward(self, x):
        return torch.batch_norm(x, self.weight, self.bias, self.zeros, self.ones, False, 0.0, 1e-20, False)


class Block(nn.Module):
    def __init__(self, channels: int, norm: nn.Module):
        super().__init__()
        self.conv = nn.Conv2d(channels // 4, channels, 1, bias=False)
        self.norm = norm
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x, identity):
        return self.relu(self.norm(self.conv(x)) + identity)


def median_ms(fn, reps: int = 41) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    # glibc keeping freed memory, the benchmark's default allocator setting (tools/ is scripts, not a package)
    bench = runpy.run_path(str(BENCHMARK), run_name="tools_benchmark_layers")
    assert bench["keep_freed_memory"](), "glibc's mallopt is needed for the benchmark's allocator setting"
    torch.set_num_threads(2)
    result = {}
    for shape in SHAPES:
        n, c, h, w = shape
        blocks = {"evonorm_affine": Block(c, EvoNormS0(c, nonlinearity=False)),
                  "direct_batch_norm": Block(c, DirectBatchNorm(c)),
                  "group_norm": Block(c, nn.GroupNorm(32, c)), "no_norm": Block(c, nn.Identity())}
        x = torch.randn(n, c // 4, h, w, requires_grad=True)
        identity = torch.randn(shape, requires_grad=True)
        grad = torch.randn(shape)
        rounds = {}
        for _ in range(7):
            for name, block in blocks.items():
                def step(block=block):
                    block(x, identity).backward(grad)
                    x.grad = identity.grad = None
                    block.zero_grad(set_to_none=True)
                rounds.setdefault(name, []).append(median_ms(step))
        result["x".join(map(str, shape))] = {name: statistics.median(v) for name, v in rounds.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
