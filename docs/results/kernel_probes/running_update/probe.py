"""The B layers' training call with the moving-variance update of this tree against the one before 2026-12-02 (the
unbiased scale applied to a tensor of the batch variances, then added): a B0 layer's forward + backward, each
repetition calling it under both updates back to back in alternating order; one JSON line, the median over 380
repetitions of this tree's time over the old one's, per shape and layout (float32, 2 threads).

    python docs/results/kernel_probes/running_update/probe.py
"""
import json
import statistics
import time

import torch

import evonorm_core
from evonorm_core import running_stats as rs

torch.set_num_threads(2)
new = rs.update_running_


def old(running, batch_value, factor, count=None):
    value = batch_value.detach()
    if count is not None and count > 1:
        value = value * (count / (count - 1))
    running.mul_(1 - factor).add_(value, alpha=factor)


out = {}
for shape in ((2, 2048, 7, 7), (4, 512, 4, 4), (16, 2048, 7, 7)):
  for cl in (False, True):
    layer = evonorm_core.build_norm_act("evonorm_b0", shape[1]).train()
    fmt = torch.channels_last if cl else torch.contiguous_format
    x = torch.randn(shape).contiguous(memory_format=fmt).requires_grad_()
    dy = torch.randn(shape).contiguous(memory_format=fmt)

    def call():
        layer(x).backward(dy)

    ratios = []
    for rep in range(400):
        t = {}
        for name, fn in ((("old", old), ("new", new)) if rep % 2 else (("new", new), ("old", old))):
            rs.update_running_ = fn
            start = time.perf_counter()
            call()
            t[name] = time.perf_counter() - start
        if rep >= 20:
            ratios.append(t["new"] / t["old"])
    out[f"{'x'.join(map(str, shape))} {'channels_last' if cl else 'NCHW'}"] = round(statistics.median(ratios), 4)
print(json.dumps(out))
