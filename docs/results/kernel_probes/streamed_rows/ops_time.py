"""Median time (ms) of the channels_last operators whose loops group rows, from one kernel library.

    python ops_time.py LIBRARY.so SHAPE [SHAPE ...]    (DTYPE=float32|bfloat16, THREADS=2 in the environment)

Prints one JSON line: [library, dtype, {shape: [b_forward training, b_forward with a given variance (eval),
b_backward, s_forward, s_backward]}], each the median of 21 calls after 3, glibc's malloc keeping freed memory as
tools/benchmark_layers.py does (--allocator heap). The schemas come from evonorm_core.ops.library (run from the
repository root with PYTHONPATH=.); the kernels from LIBRARY, so two builds can be compared in alternating processes.
"""
import ctypes
import json
import os
import statistics
import sys
import time

import torch

from evonorm_core.ops import library

so, shapes = sys.argv[1], sys.argv[2:]
dtype = getattr(torch, os.environ.get("DTYPE", "float32"))
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
libc = ctypes.CDLL(None)
assert libc.mallopt(-4, 0) and libc.mallopt(-1, 2**31 - 1)  # M_MMAP_MAX 0, M_TRIM_THRESHOLD at its largest
_lib = library.define()
torch.ops.load_library(so)
E = torch.ops.evonorm


def median_ms(f, reps=21):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


out = {}
for text in shapes:
    shape = tuple(int(v) for v in text.split("x"))
    c = shape[1]
    groups = 32 if c % 32 == 0 else 8
    x = torch.randn(shape).to(dtype).contiguous(memory_format=torch.channels_last)
    g = torch.randn(shape).to(dtype).contiguous(memory_format=torch.channels_last)
    w, b, v, var = torch.ones(c), torch.zeros(c), torch.ones(c), torch.ones(c)
    _, mean, q, bmean, bvar = E.b_forward(x, w, b, v, None, 0, 1e-5)
    _, smean, rstd = E.s_forward(x, w, b, v, groups, 1e-5, True)
    out[text] = [median_ms(lambda: E.b_forward(x, w, b, v, None, 0, 1e-5)),
                 median_ms(lambda: E.b_forward(x, w, b, v, var, 0, 1e-5)),
                 median_ms(lambda: E.b_backward(g, x, w, b, v, mean, q, bmean, bvar, 0, 1e-5, True,
                                                [True, True, True, False])),
                 median_ms(lambda: E.s_forward(x, w, b, v, groups, 1e-5, True)),
                 median_ms(lambda: E.s_backward(g, x, w, b, v, smean, rstd, groups, True, [True, True, True]))]
print(json.dumps([so, str(dtype).removeprefix("torch."), out]))
