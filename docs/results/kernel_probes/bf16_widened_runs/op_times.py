"""The B operators alone in bfloat16 (and float32): median microseconds of 35 calls after 5, 2 threads, interleaved.

    python op_times.py out.json DTYPE[,DTYPE] NxCxHxW ...

Per shape: b_forward in training (batch statistics from x), in eval (b_inference: a moving variance given) and
b_backward, B0's variant, parameters per channel.
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
    ops = torch.ops.evonorm
    _, mean, q, batch_mean, batch_var = ops.b_forward(x, w, b, v, None, 0, 1e-5)
    return {"b_forward": lambda: ops.b_forward(x, w, b, v, None, 0, 1e-5),
            "b_inference": lambda: ops.b_forward(x, w, b, v, moving_var, 0, 1e-5),
            "b_backward": lambda: ops.b_backward(g, x, w, b, v, mean, q, batch_mean, batch_var, 0, 1e-5, True, [True] * 4)}


def main(out: str, dtypes: str, shapes: list[str]) -> None:
    assert evonorm_core.ops.load("cpu"), "the C++ kernels are not built"
    torch.set_num_threads(2)
    result = {}
    for dtype in dtypes.split(","):
        for shape in shapes:
            x = torch.randn([int(v) for v in shape.split("x")], generator=torch.Generator().manual_seed(0))
            fns, times = calls(x.to(getattr(torch, dtype))), {}
            for rep in range(40):
                for name, fn in fns.items():
                    start = time.perf_counter()
                    fn()
                    times.setdefault(name, []).append(time.perf_counter() - start)
            result[f"{dtype} {shape}"] = {name: statistics.median(t[5:]) * 1e6 for name, t in times.items()}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
