"""The S operators alone (forward; backward with every gradient requested) against ATen's GroupNorm forward and
backward, median microseconds of 51 calls, at the shapes given (NxCxHxW, groups 32).

    python docs/results/kernel_probes/s_small_planes/s_backward_op.py THREADS SHAPE [SHAPE ...]

Run with PYTHONPATH set to the tree whose kernels it should time (op_ab.sh).
"""
import sys
import time

import torch

from evonorm_core import ops


def median_us(fn, reps: int = 51) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2] * 1e6


def main(threads: int, shapes: list[str]) -> None:
    assert ops.load("cpu"), "the C++ kernels did not load"
    torch.set_num_threads(threads)
    for spec in shapes:
        shape = tuple(int(v) for v in spec.split("x"))
        n, c, hw = shape[0], shape[1], shape[2] * shape[3]
        x, g = torch.randn(shape), torch.randn(shape)
        w, b, v = torch.ones(c), torch.zeros(c), torch.ones(c)
        _, mean, rstd = torch.ops.evonorm.s_forward(x, w, b, v, 32, 1e-5, True)
        _, gn_mean, gn_rstd = torch.ops.aten.native_group_norm(x, w, b, n, c, hw, 32, 1e-5)
        timings = {
            "s_forward": lambda: torch.ops.evonorm.s_forward(x, w, b, v, 32, 1e-5, True),
            "s_backward": lambda: torch.ops.evonorm.s_backward(g, x, w, b, v, mean, rstd, 32, True, [True] * 3),
            "group_norm": lambda: torch.ops.aten.native_group_norm(x, w, b, n, c, hw, 32, 1e-5),
            "group_norm_backward": lambda: torch.ops.aten.native_group_norm_backward(
                g, x, gn_mean, gn_rstd, w, n, c, hw, 32, [True] * 3),
        }
        print(f"{spec:12} " + "  ".join(f"{name} {median_us(fn):7.1f}" for name, fn in timings.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
