"""The B operators alone at MobileNetV2-B0's activated layers (batch 4, 128 px, the compiled step's shapes) against
ATen's batch norm kernels at the same shapes: where the B0 step's operator time goes, shape by shape.

For every EvoNorm-B0 layer with its nonlinearity in torchvision's MobileNetV2 converted by ``convert_norm_act``,
times ``evonorm::b_forward`` (batch statistics from x) and ``evonorm::b_backward`` (all four gradients, the
instance mean taken from x as autograd on the CPU passes it), and ``aten::native_batch_norm`` (training) and
``aten::native_batch_norm_backward`` on the same tensors, the four calls in turn each round, set up as the other
probes here time operators (op_ab.py's ``ready_to_time``: 2 threads, freed memory kept in the process); prints
the medians of the timed rounds per shape and the step's total, each shape weighted by its number of layers.

    python docs/results/kernel_probes/mnv2_b_operators/op_mix.py [--rounds 60] [--json out.json]
"""
import argparse
import collections
import json
import runpy
from pathlib import Path

import torch
import torchvision

from evonorm_core.convert import convert_norm_act

OP_AB = runpy.run_path(str(Path(__file__).resolve().parent.parent / "op_ab.py"), run_name="op_ab")


def layer_shapes(batch: int, size: int) -> collections.Counter:
    model = convert_norm_act(torchvision.models.mobilenet_v2(), "evonorm_b0").train()
    shapes = collections.Counter()
    hooks = [m.register_forward_hook(lambda m, i, o: shapes.update([tuple(i[0].shape)]))
             for m in model.modules() if type(m).__name__ == "EvoNormB0" and m.nonlinearity]
    with torch.no_grad():
        model(torch.randn(batch, 3, size, size))
    for h in hooks:
        h.remove()
    return shapes


def calls(shape: tuple) -> dict:
    x, g, C = torch.randn(shape), torch.randn(shape), shape[1]
    w, b, v = torch.rand(C) + 0.5, torch.randn(C), torch.rand(C) + 0.5
    running_mean, running_var = torch.zeros(C), torch.ones(C)
    ops = torch.ops.evonorm
    _, _, q, batch_mean, batch_var = ops.b_forward(x, w, b, v, None, 0, 1e-5)
    _, saved_mean, saved_invstd = torch.native_batch_norm(x, w, b, running_mean, running_var, True, 0.1, 1e-5)
    return {
        "b_forward": lambda: ops.b_forward(x, w, b, v, None, 0, 1e-5),
        "b_backward": lambda: ops.b_backward(g, x, w, b, v, torch.empty(0), q, batch_mean, batch_var, 0, 1e-5, True,
                                             [True] * 4),
        "batch_norm": lambda: torch.native_batch_norm(x, w, b, running_mean, running_var, True, 0.1, 1e-5),
        "batch_norm_backward": lambda: torch.ops.aten.native_batch_norm_backward(
            g, x, w, running_mean, running_var, saved_mean, saved_invstd, True, 1e-5, [True] * 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60, help="rounds per shape, the first 10 untimed (default 60)")
    parser.add_argument("--json", default="", help="write the medians (us) per shape to this file")
    args = parser.parse_args()
    OP_AB["ready_to_time"]()
    torch.manual_seed(0)
    results, total = {}, collections.defaultdict(float)
    for shape, count in sorted(layer_shapes(4, 128).items()):
        medians = OP_AB["time_calls"](calls(shape), args.rounds, 10)
        name = "x".join(map(str, shape))
        results[name] = {"layers": count, "us": medians}
        for op, us in medians.items():
            total[op] += us * count
        print(f"{name:14s} x{count:2d}  " + "  ".join(f"{k} {v:7.1f} us" for k, v in medians.items()))
    print("per step, shapes weighted by their layers:", "  ".join(f"{k} {v / 1000:.2f} ms" for k, v in total.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shapes": results, "step_ms": {k: v / 1000 for k, v in total.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
