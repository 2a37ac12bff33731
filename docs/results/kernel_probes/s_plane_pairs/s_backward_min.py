"""The S operators alone at one thread on shapes whose tensors stay in cache, so that what is timed is the
kernels' own work, not the machine's memory: the minimum of 400 calls each of the backward (every gradient
requested) and the forward, in microseconds, at the shapes given (NxCxHxW, groups 32).

    python docs/results/kernel_probes/s_plane_pairs/s_backward_min.py SHAPE [SHAPE ...]

Run with PYTHONPATH set to the tree whose kernels it should time (op_ab.sh).
"""
import sys
import time

import torch

from evonorm_core import ops


def min_us(fn, reps: int = 400) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main(shapes: list[str]) -> None:
    assert ops.load("cpu"), "the C++ kernels did not load"
    torch.set_num_threads(1)
    cells = []
    for spec in shapes:
        shape = tuple(int(v) for v in spec.split("x"))
        c = shape[1]
        x, g = torch.randn(shape), torch.randn(shape)
        w, b, v = torch.ones(c), torch.zeros(c), torch.ones(c)
        _, mean, rstd = torch.ops.evonorm.s_forward(x, w, b, v, 32, 1e-5, False)
        backward = min_us(lambda: torch.ops.evonorm.s_backward(g, x, w, b, v, mean, rstd, 32, False, [True] * 3))
        forward = min_us(lambda: torch.ops.evonorm.s_forward(x, w, b, v, 32, 1e-5, False))
        cells.append(f"{spec} s_backward {backward:6.1f} s_forward {forward:6.1f}")
    print(" | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
