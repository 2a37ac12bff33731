"""Microseconds per call of the EvoNorm layers against BN-ReLU and GN-ReLU at a shape where the call's host cost is
most of it (1x8x2x2) and at ResNet-50's last stage at batch 2 (2x2048x7x7), eval-mode inference
(``torch.inference_mode``) and a training forward + backward, the fastest of nine repeats; one JSON line for the tree that evonorm_core is
imported from (run it with PYTHONPATH set to each tree in turn: run.sh).

    python docs/results/kernel_probes/layer_host_cost/probe.py
"""
import json
import timeit

import torch
from torch import nn

import evonorm_core
from evonorm_core.layers import EvoNormB0, EvoNormB2, EvoNormS0, EvoNormS2

SHAPES = ((1, 8, 2, 2), (2, 2048, 7, 7))


def layers(c: int) -> dict[str, nn.Module]:
    return {
        "bn_relu": nn.Sequential(nn.BatchNorm2d(c), nn.ReLU()),
        "gn_relu": nn.Sequential(nn.GroupNorm(8 if c == 8 else 32, c), nn.ReLU()),
        "evonorm_b0": EvoNormB0(c), "evonorm_b2": EvoNormB2(c),
        "evonorm_s0": EvoNormS0(c, groups=8 if c == 8 else 32), "evonorm_s2": EvoNormS2(c, groups=8 if c == 8 else 32),
        "evonorm_b0 affine": EvoNormB0(c, nonlinearity=False),
    }


def per_call_us(fn, calls: int) -> float:
    fn()
    return min(timeit.repeat(fn, number=calls, repeat=9)) / calls * 1e6  # timeit's advice: the others are noise


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    result = {"tree": evonorm_core.__file__, "us": {}}
    for shape in SHAPES:
        x = torch.randn(shape)
        grad = torch.randn(shape)
        calls = 2000 if shape[1] == 8 else 200
        for name, layer in layers(shape[1]).items():
            layer.eval()
            with torch.inference_mode():
                inference = per_call_us(lambda layer=layer: layer(x), calls)
            layer.train()
            xg = x.clone().requires_grad_()
            train = per_call_us(lambda layer=layer, xg=xg: layer(xg).backward(grad), calls // 2)
            key = "x".join(map(str, shape))
            result["us"][f"{key} {name}"] = {"inference": round(inference, 2), "fwd+bwd": round(train, 2)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
