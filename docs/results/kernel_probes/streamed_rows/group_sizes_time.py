"""Median times (ms) of channels_last b_forward (training, eval), b_backward and s_forward from one build of
group_sizes.patch (MG, OG, BG: rows per group in the moments, the B output and the B backward sums), 2 threads:

    PYTHONPATH=. python group_sizes_time.py LIBRARY.so SHAPE [SHAPE ...]

Prints [library, {shape: [four medians of 21 calls after 3]}] as one JSON line (group_sizes.sh).
"""
import ctypes
import json
import os
import sys
import time

import torch

from evonorm_core.ops import library

so = sys.argv[1]
torch.set_num_threads(int(os.environ.get("T", "2")))
libc = ctypes.CDLL("libc.so.6")
libc.mallopt(-4, 0)  # M_MMAP_MAX
libc.mallopt(-1, 2**31 - 1)  # M_TRIM_THRESHOLD
_lib = library.define()
torch.ops.load_library(so)
E = torch.ops.evonorm


def t(f, reps=21):
    for _ in range(3):
        f()
    ts = []
    for _ in range(reps):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


res = {}
for s in sys.argv[2:]:
    shp = tuple(map(int, s.split("x")))
    C = shp[1]
    x = torch.randn(shp).contiguous(memory_format=torch.channels_last)
    g = torch.randn_like(x)
    w, b, v, rv = torch.ones(C), torch.zeros(C), torch.ones(C), torch.ones(C)
    y, mean, q, bm, bv = E.b_forward(x, w, b, v, None, 0, 1e-5)
    res[s] = [t(lambda: E.b_forward(x, w, b, v, None, 0, 1e-5)), t(lambda: E.b_forward(x, w, b, v, rv, 0, 1e-5)),
              t(lambda: E.b_backward(g, x, w, b, v, mean, q, bm, bv, 0, 1e-5, True, [True, True, True, False])),
              t(lambda: E.s_forward(x, w, b, v, 32 if C % 32 == 0 else 16, 1e-5, True))]
print(json.dumps([so, res]))
