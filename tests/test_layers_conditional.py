"""ConditionalNormAct2d: gamma = 1 + W_g c, beta = W_b c through the layer's own forward, against float64 formulas."""
import inspect

import pytest
import torch
from torch import nn

import evonorm_core
from evonorm_core import ConditionalNormAct2d, conditional_norm_act_factory, functional

from . import paper_reference as ref

NAMES = evonorm_core.list_norm_acts()


def options(name):
    return {"groups": 4} if name in ref.GROUPED else {}


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_matches_paper_formula_with_class_conditional_gamma_beta(name, training):
    gen = torch.Generator().manual_seed(3)
    layer = conditional_norm_act_factory(name, 5, **options(name))(8).double().train(training)
    assert layer.norm.weight is None and layer.norm.bias is None
    p = {}
    with torch.no_grad():
        for n, param in layer.norm.named_parameters():
            param.uniform_(0.5, 1.5, generator=gen)
            p[n] = param.detach().clone()
        for n, buffer in layer.norm.named_buffers():
            if buffer.is_floating_point():
                buffer.uniform_(0.5, 1.5, generator=gen)
            p[n] = buffer.detach().clone()
    x = torch.randn(4, 8, 3, 5, generator=gen, dtype=torch.float64) * 2 + 0.5
    cond = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    gamma = 1 + cond @ layer.gain.weight.detach().t()  # 1 + W_g c, per sample
    beta = cond @ layer.bias.weight.detach().t()
    f = ref.reference(name, True)
    groups = 4 if name in ref.GROUPED else None
    expected = torch.stack([f(x, {**p, "gamma": gamma[i], "beta": beta[i]}, 1e-5, training=training, groups=groups)[i]
                            for i in range(4)])
    torch.testing.assert_close(layer(x, cond), expected, rtol=1e-10, atol=1e-10)


def test_zero_projections_give_the_layer_at_gamma_1_beta_0():
    layer = conditional_norm_act_factory("evonorm_b0", 3)(8)
    with torch.no_grad():
        layer.gain.weight.zero_()
        layer.bias.weight.zero_()
    plain = evonorm_core.build_norm_act("evonorm_b0", 8)
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(layer(x, torch.randn(2, 3)), plain(x))
    torch.testing.assert_close(layer.norm.running_var, plain.running_var)  # statistics are the layer's own


@pytest.mark.parametrize("name, function", [("evonorm_s0", "_evonorm_s"), ("evonorm_b0", "_evonorm_b")])
def test_runs_through_the_layers_fused_path(monkeypatch, name, function):
    """The conditional layer is the layer's forward_affine, so its impl is honoured (fused here); the layers call
    the functional forms past the checks of their own state."""
    seen = []
    original = getattr(functional, function)

    def spy(*args, **kwargs):
        arguments = inspect.signature(original).bind(*args, **kwargs).arguments
        seen.append((arguments["impl"], tuple(arguments["weight"].shape)))
        return original(*args, **kwargs)

    monkeypatch.setattr(functional, function, spy)
    layer = conditional_norm_act_factory(name, 3, impl="fused", **options(name))(8)
    layer(torch.randn(2, 8, 4, 4), torch.randn(2, 3))
    assert seen == [("fused", (2, 8))]


def test_gradients_reach_the_projections_and_the_layer():
    layer = conditional_norm_act_factory("evonorm_s0", 3, groups=2)(8)
    layer(torch.randn(2, 8, 4, 4), torch.randn(2, 3)).square().sum().backward()
    for n, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n


def test_custom_projection_and_a_maker_without_affine():
    calls = []

    def make_linear(i, o):
        calls.append((i, o))
        return nn.Linear(i, o, bias=False)

    make = conditional_norm_act_factory(evonorm_core.norm_act_factory("gn_relu", groups=2, affine=False), 6, make_linear)
    layer = make(8)
    assert calls == [(6, 8), (6, 8)] and layer.num_channels == 8
    assert layer(torch.randn(3, 8, 2, 2), torch.randn(3, 6)).shape == (3, 8, 2, 2)
    assert torch.fx.symbolic_trace(layer)  # the conditional layer traces too


def test_errors():
    with pytest.raises(ValueError, match="must be built with affine=False"):
        ConditionalNormAct2d(evonorm_core.build_norm_act("evonorm_s0", 8), 4)
    with pytest.raises(ValueError, match="must be built with affine=False"):
        conditional_norm_act_factory(evonorm_core.norm_act_factory("bn_relu"), 4)(8)
    with pytest.raises(TypeError, match="needs a layer with forward_affine"):
        ConditionalNormAct2d(nn.BatchNorm2d(8, affine=False), 4)
    with pytest.raises(ValueError, match="cond_dim must be a positive int"):
        ConditionalNormAct2d(evonorm_core.build_norm_act("evonorm_s0", 8, affine=False), 0)
    layer = conditional_norm_act_factory("bn_relu", 4)(8)
    with pytest.raises(ValueError, match=r"cond must be \(N, cond_dim\) = \(2, 4\).*got \(3, 4\)"):
        layer(torch.randn(2, 8, 3, 3), torch.randn(3, 4))
    with pytest.raises(ValueError, match="does not take option"):
        conditional_norm_act_factory("evonorm_s0", 4, momentum=0.1)


def test_reset_parameters_resets_the_layer_and_both_projections():
    layer = conditional_norm_act_factory("bn_swish", 4)(8)
    with torch.no_grad():
        for p in layer.parameters():
            p.fill_(3.0)
    layer.norm(torch.randn(2, 8, 3, 3))  # moving averages moved
    layer.reset_parameters()
    assert torch.all(layer.norm.v1 == 1) and torch.all(layer.norm.running_var == 1)
    for projection in (layer.gain, layer.bias):  # nn.Linear's own initialisation: |w| <= 1 / sqrt(cond_dim)
        assert not torch.all(projection.weight == 3.0) and projection.weight.abs().max() <= 0.5
    assert repr(layer).startswith("ConditionalNormAct2d(\n  cond_dim=4") and layer.num_channels == 8


class AffineFree(nn.Module):
    """A layer with forward_affine and no weight/bias attributes at all (a third-party layer may lack them)."""

    num_channels = 8

    def forward_affine(self, x, weight, bias):
        return functional.affine(x, weight, bias)


@pytest.mark.parametrize("own", ["weight", "bias"])
def test_a_layer_with_either_affine_parameter_of_its_own_is_refused_by_name(own):
    layer = evonorm_core.build_norm_act("evonorm_s0", 8, affine=False)
    setattr(layer, own, nn.Parameter(torch.ones(8)))
    with pytest.raises(ValueError, match=r"^the layer of a conditional norm-act must be built with affine=False \(its "
                                         r"gamma/beta are 1 \+ W_g c and W_b c\), got EvoNormS0 with its own "
                                         r"weight/bias$"):
        ConditionalNormAct2d(layer, 4)
    with pytest.raises(TypeError, match=r"needs a layer with forward_affine\(x, weight, bias\) \(evonorm_core's "
                                        r"NormAct2d and GraphLayer have it\), got BatchNorm2d$"):
        ConditionalNormAct2d(nn.BatchNorm2d(8, affine=False), 4)


@pytest.mark.parametrize("cond_dim", [0, -1, True, 2.0, "4"])
def test_cond_dim_must_be_a_positive_int(cond_dim):
    with pytest.raises(ValueError, match=rf"^cond_dim must be a positive int, got {cond_dim!r}$"):
        ConditionalNormAct2d(AffineFree(), cond_dim)


def test_a_layer_and_projections_without_weight_bias_or_reset_parameters():
    """cond_dim 1 is accepted; a layer without weight/bias attributes is one without affine; projections that
    have no reset_parameters (a Sequential) are left as they are by reset_parameters."""
    layer = ConditionalNormAct2d(AffineFree(), 1, lambda i, o: nn.Sequential(nn.Linear(i, o, bias=False)))
    layer.reset_parameters()
    x, cond = torch.randn(2, 8, 3, 3), torch.randn(2, 1)
    gamma, beta = layer.gamma_beta(cond)
    torch.testing.assert_close(layer(x, cond), x * gamma[..., None, None] + beta[..., None, None])


def test_the_factory_asks_its_maker_for_the_nonlinearity():
    seen = []

    def maker(channels, nonlinearity):  # no default: the factory must say it
        seen.append(nonlinearity)
        return evonorm_core.build_norm_act("evonorm_s0", channels, nonlinearity, groups=2, affine=False)

    assert conditional_norm_act_factory(maker, 4)(8).norm.nonlinearity and seen == [True]
