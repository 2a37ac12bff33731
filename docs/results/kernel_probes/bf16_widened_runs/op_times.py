"""The EvoNorm operators alone: median microseconds of 35 calls after 5, 2 threads, interleaved.

    python op_times.py out.json DTYPE[,DTYPE] OP[,OP] NxCxHxW ...

OPs: b_forward (training: batch statistics from x), b_inference (eval: a moving variance given), b_backward (B0's
variant), s_forward and s_backward (S0: 32 groups, or C when fewer); parameters per channel.
"""
import json
import statistics
import sys
import time

import torch

import evonorm_core.ops


def calls(x: torch.Tensor) -> dict:
    gen, c = torch.Generator().manual_seed(0), x.shape[1]
    g = torch.randn(x.shape, generator=gen).to(x.dtype)
    w, b, v, moving_var = torch.randn(c), torch.randn(c), torch.randn(c), torch.rand(c, generator=gen) + 0.5
    ops, groups = torch.ops.evonorm, min(32, c)
    _, mean, q, batch_mean, batch_var = ops.b_forward(x, w, b, v, None, 0, 1e-5)
    _, s_mean, rstd = ops.s_forward(x, w, b, v, groups, 1e-5, False)
    return {"b_forward": lambda: ops.b_forward(x, w, b, v, None, 0, 1e-5),
            "b_inference": lambda: ops.b_forward(x, w, b, v, moving_var, 0, 1e-5),
            "b_backward": lambda: ops.b_backward(g, x, w, b, v, mean, q, batch_mean, batch_var, 0, 1e-5, True, [True] * 4),
            "s_forward": lambda: ops.s_forward(x, w, b, v, groups, 1e-5, False),
            "s_backward": lambda: ops.s_backward(g, x, w, b, v, s_mean, rstd, groups, False, [True] * 3)}


def main(out: str, dtypes: str, names: str, shapes: list[str]) -> None:
    assert evonorm_core.ops.load("cpu"), "the C++ kernels are not built"
    torch.set_num_threads(2)
    result = {}
    for dtype in dtypes.split(","):
        for shape in shapes:
            x = torch.randn([int(v) for v in shape.split("x")], generator=torch.Generator().manual_seed(0))
            every, times = calls(x.to(getattr(torch, dtype))), {}
            fns = {name: every[name] for name in names.split(",")}
            for rep in range(40):
                for name, fn in fns.items():
                    start = time.perf_counter()
                    fn()
                    times.setdefault(name, []).append(time.perf_counter() - start)
            result[f"{dtype} {shape}"] = {name: statistics.median(t[5:]) * 1e6 for name, t in times.items()}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
