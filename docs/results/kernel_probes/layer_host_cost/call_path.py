"""Microseconds per call along an eval-mode EvoNorm layer's call path at 1x8x2x2 (host time: the kernels have
almost nothing to do), one thread, ``torch.inference_mode``, the fastest of five repeats of 20,000 calls: the layers,
their public functional forms, the operator alone and BN-ReLU beside them. Run with PYTHONPATH set to a tree to time
that tree's code.

    python docs/results/kernel_probes/layer_host_cost/call_path.py
"""
import timeit

import torch
from torch import nn

from evonorm_core import functional, ops
from evonorm_core.layers import EvoNormB0, EvoNormS0

CALLS = 20_000


def per_call_us(fn) -> float:
    fn()
    return min(timeit.repeat(fn, number=CALLS, repeat=5)) / CALLS * 1e6


def main() -> None:
    torch.set_num_threads(1)
    c = 8
    x = torch.randn(1, c, 2, 2)
    b0, s0 = EvoNormB0(c).eval(), EvoNormS0(c, groups=c).eval()
    bn_relu = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU()).eval()
    w, b, v, rv = b0.weight, b0.bias, b0.v1, b0.running_var
    assert ops.load("cpu"), "the C++ kernels are needed"
    calls = {
        "nn.Sequential(BatchNorm2d, ReLU)": lambda: bn_relu(x),
        "EvoNormB0 layer": lambda: b0(x),
        "EvoNormS0 layer": lambda: s0(x),
        "functional.evonorm_b (public)": lambda: functional.evonorm_b(
            x, w, b, v, rv, b0.num_batches_tracked, variant="b0", training=False, momentum=0.1, eps=1e-5),
        "b_forward operator (ops.library.b_forward_no_grad)": lambda: ops.library.b_forward_no_grad(
            x, w, b, v, rv, 0, 1e-5),
        "functional.check_affine": lambda: functional.check_affine("f", x, w, b),
    }
    with torch.inference_mode():
        for name, fn in calls.items():
            print(f"{name:52s} {per_call_us(fn):6.2f} us")


if __name__ == "__main__":
    main()
