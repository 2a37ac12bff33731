"""Where ResNet-50's eager EvoNorm-S0 training step spends its time over GN-ReLU's: the benchmark's two models
(tools/benchmark_layers.py: batch 4, 128 px, SGD, 2 threads, glibc malloc keeping freed memory) and three models
between them, all stepped in interleaved rounds; one JSON line (median step ratio to GN-ReLU's per model).

* ``fx_all_gn``: the S0 model's converted graph (convert_norm_act; its residual adds out of place) with every
  EvoNorm replaced by native GroupNorm (+ ReLU where the layer has its nonlinearity): the graph alone.
* ``act_native``: only the 33 S0 layers with a nonlinearity replaced by native GroupNorm + ReLU, the 20 without
  (x * gamma + beta) kept: the graph and the affine layers.
* ``act_python``: those 33 replaced by native GroupNorm + ReLU inside one Python autograd.Function per layer, the
  kind of call path the fused S0 layer has: adds the Python autograd function's cost.

    python docs/results/kernel_probes/r50_s0_step_parts/probe.py [ROUNDS]
"""
import copy
import json
import runpy
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from evonorm_core.layers import EvoNormS0

# tools/ is a folder of scripts, not a package: the benchmark's functions, run from its file
bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))


class GroupNormReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float):
        n, c, h, w = x.shape
        out, mean, rstd = torch.ops.aten.native_group_norm(x, weight, bias, n, c, h * w, groups, eps)
        y = torch.relu_(out)
        ctx.save_for_backward(x, mean, rstd, weight, y)
        ctx.groups = groups
        return y

    @staticmethod
    def backward(ctx, grad):
        x, mean, rstd, weight, y = ctx.saved_tensors
        n, c, h, w = x.shape
        grad = torch.ops.aten.threshold_backward(grad, y, 0)
        dx, dw, db = torch.ops.aten.native_group_norm_backward(grad, x, mean, rstd, weight, n, c, h * w, ctx.groups,
                                                               [True, True, True])
        return dx, dw, db, None, None


class GroupNormReLUPython(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return GroupNormReLUFunction.apply(x, self.weight, self.bias, 32, 1e-5)


def native(channels: int, nonlinearity: bool) -> nn.Module:
    norm = nn.GroupNorm(32, channels)
    return nn.Sequential(norm, nn.ReLU(inplace=True)) if nonlinearity else norm


def replaced(model: nn.Module, make, activated_only: bool) -> nn.Module:
    model = copy.deepcopy(model)
    for name, module in list(model.named_modules()):
        if isinstance(module, EvoNormS0) and (module.nonlinearity or not activated_only):
            model.set_submodule(name, make(module.weight.shape[0], module.nonlinearity))
    return model


def main(rounds: int) -> None:
    bl.keep_freed_memory()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    built = bl.whole_models("resnet50", torch.device("cpu"), torch.contiguous_format)
    s0 = built["evonorm_s0"]
    models = {
        "evonorm_s0": s0,
        "gn_relu": built["gn_relu (native)"],
        "fx_all_gn": replaced(s0, native, activated_only=False),
        "act_native": replaced(s0, native, activated_only=True),
        "act_python": replaced(s0, lambda c, _: GroupNormReLUPython(c), activated_only=True),
    }
    images, labels = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
    steps, _ = bl.training_steps(models, images, labels, "float32", False, lr=1e-3)
    times = bl.interleaved_times(steps, rounds, 2, torch.device("cpu"))
    ratios = {k: statistics.median(a / b for a, b in zip(v, times["gn_relu"])) for k, v in times.items()}
    print(json.dumps({"rounds": rounds, "ratio_to_gn_relu": ratios,
                      "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
