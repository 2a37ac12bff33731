"""Property-based tests of every registered layer against the float64 paper formulas
(``tests/paper_reference.py``) over random shapes, groups, dtypes, memory layouts, eps, affine
or not, nonlinearity or not, training or eval, both implementations of the EvoNorms.

``test_layers.py`` checks each layer at a few fixed shapes in float64; here hypothesis draws the
shape (1x1 maps and batches of one included), the groups (any divisor of the channels, or the
default), eps over six decades, the input's dtype (float64, float32, and float16/bfloat16 both
under a float32 layer, as autocast runs it, and with the layer cast to that dtype) and layout
(contiguous, channels_last). The reference sees exactly the values the layer sees (the input
and parameters as stored, widened to float64), so the only differences are the layer's own
rounding: 1e-9 in float64, 1e-4 in float32, 1e-2 (float16) and 3e-2 (bfloat16) relative to the
output's largest value.
"""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evonorm_core
from evonorm_core.layers import GroupedNormAct2d

from . import paper_reference as ref

NAMES = evonorm_core.list_norm_acts()
EVONORMS = {n for n in NAMES if n.startswith("evonorm_")}
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
DTYPES = {"float64": (torch.float64, torch.float64), "float32": (torch.float32, torch.float32),
          "float16 input, float32 layer": (torch.float16, torch.float32), "float16": (torch.float16, torch.float16),
          "bfloat16 input, float32 layer": (torch.bfloat16, torch.float32), "bfloat16": (torch.bfloat16, torch.bfloat16)}


@st.composite
def layer_cases(draw):
    name = draw(st.sampled_from(NAMES))
    groups = draw(st.integers(1, 4))
    channels = groups * draw(st.integers(1, 4))
    shape = (draw(st.integers(1, 4)), channels, draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    options = {"eps": 10.0 ** draw(st.integers(-7, -2)) * draw(st.sampled_from([1.0, 3.0])),
               "affine": draw(st.booleans())}
    if name in ref.GROUPED and draw(st.booleans()):
        options["groups"] = groups  # else the default: 32 lowered until it divides
    if name in EVONORMS:
        options["impl"] = draw(st.sampled_from(["fused", "reference"]))
    return {
        "name": name, "shape": shape, "options": options,
        "nonlinearity": draw(st.booleans()), "training": draw(st.booleans()),
        "dtype": draw(st.sampled_from(sorted(DTYPES))),
        "channels_last": draw(st.booleans()), "seed": draw(st.integers(0, 2**16)),
    }


def parameters_of(layer: torch.nn.Module, channels: int, generator: torch.Generator) -> dict:
    """Random values for every parameter and moving average (positive variances); the reference's
    ``p`` (gamma 1 and beta 0 without affine), widened from the values the layer stores."""
    with torch.no_grad():
        for name, param in layer.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5 + (1.0 if name == "weight" else 0.0))
        if getattr(layer, "running_var", None) is not None:
            layer.running_var.copy_(torch.rand(channels, generator=generator) + 0.5)
        if getattr(layer, "running_mean", None) is not None:
            layer.running_mean.copy_(torch.randn(channels, generator=generator))
    p = {"gamma": torch.ones(channels, dtype=torch.float64), "beta": torch.zeros(channels, dtype=torch.float64)}
    names = {"weight": "gamma", "bias": "beta"}
    for name, tensor in [*layer.named_parameters(), *layer.named_buffers()]:
        p[names.get(name, name)] = tensor.detach().double()
    return p


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=layer_cases())
def test_every_layer_is_its_paper_formula_over_shapes_groups_dtypes_layouts_and_eps(case):
    input_dtype, layer_dtype = DTYPES[case["dtype"]]
    name, shape = case["name"], case["shape"]
    layer = evonorm_core.build_norm_act(name, shape[1], case["nonlinearity"], **case["options"]).to(layer_dtype)
    generator = torch.Generator().manual_seed(case["seed"])
    p = parameters_of(layer, shape[1], generator)
    layer.train(case["training"])
    x = (torch.randn(shape, generator=generator, dtype=torch.float64) * 2 + 0.3).to(input_dtype)
    if case["channels_last"]:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(input_dtype == torch.float64)
    groups = layer.groups if isinstance(layer, GroupedNormAct2d) else None
    if "groups" in case["options"]:
        assert groups == case["options"]["groups"]
    expected = ref.reference(name, case["nonlinearity"])(x.detach().double(), p, layer.eps, training=case["training"],
                                                          groups=groups)
    out = layer(x)
    assert out.dtype == input_dtype and out.shape == shape
    tolerance = TOLERANCE[input_dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(out.double(), expected, rtol=tolerance, atol=tolerance * scale)
    if input_dtype == torch.float64:  # the input gradient against autograd through the formula
        weights = torch.randn(shape, generator=generator, dtype=torch.float64)
        (grad,) = torch.autograd.grad((out * weights).sum(), x)
        x64 = x.detach().clone().requires_grad_()
        reference_out = ref.reference(name, case["nonlinearity"])(x64, p, layer.eps, training=case["training"],
                                                                   groups=groups)
        (expected_grad,) = torch.autograd.grad((reference_out * weights).sum(), x64)
        gscale = max(1.0, expected_grad.abs().max().item())
        torch.testing.assert_close(grad, expected_grad, rtol=1e-8, atol=1e-8 * gscale)
