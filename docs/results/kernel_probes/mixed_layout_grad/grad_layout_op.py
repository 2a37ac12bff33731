"""The backward operators alone with x channels_last and its gradient channels_last or NCHW (2 threads).

Inductor hands the operators NCHW gradients of channels_last inputs around the depthwise convolutions it runs in
NCHW (docs/benchmarks.md). Per shape and operator: the best of three medians of 15 calls for each gradient layout,
interleaved, and their ratio; dx is checked against the channels_last gradient's.
    python grad_layout_op.py [out.json]
"""
import json
import math
import sys
import time

import torch

import evonorm_core.ops

SHAPES = [(4, 96, 64, 64), (4, 144, 32, 32), (4, 192, 16, 16), (4, 576, 8, 8), (4, 1280, 4, 4), (16, 256, 56, 56),
          (16, 2048, 7, 7)]


def median_seconds(call, reps: int = 15) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2]


def backward_calls(shape):
    """(name, backward(grad)) of b_backward (B0, batch statistics) and s_backward (S0) at x of `shape`."""
    c = shape[1]
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    w, b, v = torch.rand(c) + 0.5, torch.randn(c), torch.rand(c)
    _, mean, q, batch_mean, batch_var = torch.ops.evonorm.b_forward(x, w, b, v, None, 0, 1e-5)
    groups = math.gcd(32, c)
    _, s_mean, rstd = torch.ops.evonorm.s_forward(x, w, b, v, groups, 1e-5, False)
    return [("b_backward", lambda g: torch.ops.evonorm.b_backward(g, x, w, b, v, mean, q, batch_mean, batch_var, 0,
                                                                  1e-5, True, [True, True, True, False])),
            ("s_backward", lambda g: torch.ops.evonorm.s_backward(g, x, w, b, v, s_mean, rstd, groups, False,
                                                                  [True, True, True]))]


def main() -> None:
    evonorm_core.ops.load("cpu")
    torch.set_num_threads(2)
    rows = []
    for shape in SHAPES:
        torch.manual_seed(0)
        grad_cl = torch.randn(shape).contiguous(memory_format=torch.channels_last)
        grad_nchw = grad_cl.contiguous()
        for name, backward in backward_calls(shape):
            torch.testing.assert_close(backward(grad_nchw)[0], backward(grad_cl)[0], rtol=1e-4, atol=1e-5)
            same, other = [], []
            for _ in range(3):
                same.append(median_seconds(lambda: backward(grad_cl)))
                other.append(median_seconds(lambda: backward(grad_nchw)))
            row = {"op": name, "shape": "x".join(map(str, shape)), "grad_channels_last_ms": min(same) * 1e3,
                   "grad_nchw_ms": min(other) * 1e3, "ratio": min(other) / min(same)}
            rows.append(row)
            print(f"{name} {row['shape']:>14}: grad channels_last {row['grad_channels_last_ms']:7.3f} ms, "
                  f"grad NCHW {row['grad_nchw_ms']:7.3f} ms, NCHW / channels_last {row['ratio']:.2f}", flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
