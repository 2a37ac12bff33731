"""Does a layer's time depend on where its buffers land? The S backward operator, and native GroupNorm + SiLU
forward + backward, on the same inputs in one process, after 0 to 5 extra buffers of the input's size have been
allocated and left untouched (each moves where the next outputs are placed, nothing else): the median of 100 calls
in microseconds per count, 2 threads, freed memory kept in the heap as the benchmark keeps it.

    python docs/results/kernel_probes/buffer_placement/probe.py NxCxHxW
"""
import ctypes
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from evonorm_core import ops

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (the benchmark's --allocator heap)


def median_us(fn, reps: int = 100) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(spec: str) -> None:
    assert ops.load("cpu"), "the C++ kernels did not load"
    libc = ctypes.CDLL(None)
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    torch.set_num_threads(2)
    shape = tuple(int(v) for v in spec.split("x"))
    c = shape[1]
    x, g = torch.randn(shape), torch.randn(shape)
    w, b, v = torch.ones(c), torch.zeros(c), torch.ones(c)
    _, mean, rstd = torch.ops.evonorm.s_forward(x, w, b, v, 32, 1e-5, False)

    def s_backward() -> None:
        torch.ops.evonorm.s_backward(g, x, w, b, v, mean, rstd, 32, False, [True] * 3)

    def gn_silu() -> None:
        F.silu(F.group_norm(x.detach().requires_grad_(), 32, w, b)).backward(g)

    cells = {"s_backward": [], "gn_silu fwd+bwd": []}
    for extra in range(6):
        spacers = [torch.empty(shape) for _ in range(extra)]
        cells["s_backward"].append(median_us(s_backward))
        cells["gn_silu fwd+bwd"].append(median_us(gn_silu))
        del spacers
    print(spec, " | ".join(f"{name} " + " ".join(f"{t:.0f}" for t in ts) for name, ts in cells.items()))


if __name__ == "__main__":
    main(sys.argv[1])
