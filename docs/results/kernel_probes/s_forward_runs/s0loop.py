"""EvoNorm-S0 called in a loop, for ``perf record``: the forward alone (``f``, under ``torch.no_grad``) or forward
and backward (``fb``), CALLS times at SHAPE on THREADS threads; prints the mean time per call.

    perf record -o perf.data python docs/results/kernel_probes/s_forward_runs/s0loop.py 16x2048x7x7 2 f 4000
"""
import sys
import time

import torch

import evonorm_core


def main(shape_text: str, threads: int, mode: str, calls: int) -> None:
    torch.set_num_threads(threads)
    shape = tuple(int(v) for v in shape_text.split("x"))
    x, grad = torch.randn(shape, requires_grad=True), torch.randn(shape)
    layer = evonorm_core.build_norm_act("evonorm_s0", shape[1])
    start = time.perf_counter()
    for _ in range(calls):
        if mode == "f":
            with torch.no_grad():
                layer(x)
        else:
            layer(x).backward(grad)
    print(f"{(time.perf_counter() - start) / calls * 1e3:.3f} ms a call")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
