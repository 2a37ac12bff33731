"""Every registered layer against the paper's formulas (float64 references in paper_reference.py)."""
import io

import pytest
import torch

import evonorm_core
from evonorm_core.layers import BatchStatsNormAct2d, GroupedNormAct2d

from . import paper_reference as ref

NAMES = evonorm_core.list_norm_acts()
EXPECTED_NAMES = {
    "evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2",
    "bn_relu", "bn_prelu", "bn_swish1", "bn_swish", "gn_relu", "gn_swish", "frn", "ln_relu",
    "pixelnorm_relu", "rs_rej",
}


def randomize(layer: torch.nn.Module, generator: torch.Generator) -> dict:
    """Give every parameter and buffer non-default values; return them as the reference's ``p``."""
    p = {}
    with torch.no_grad():
        for name, param in layer.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * 0.5 + (1.0 if name == "weight" else 0.0))
        if getattr(layer, "running_var", None) is not None:
            layer.running_var.copy_(torch.rand(layer.num_channels, generator=generator, dtype=torch.float64) + 0.5)
        if getattr(layer, "running_mean", None) is not None:
            layer.running_mean.copy_(torch.randn(layer.num_channels, generator=generator, dtype=torch.float64))
    names = {"weight": "gamma", "bias": "beta"}
    for name, tensor in [*layer.named_parameters(), *layer.named_buffers()]:
        p[names.get(name, name)] = tensor.detach().clone().double()
    return p


def build(name, channels=8, nonlinearity=True, **options):
    if name in ref.GROUPED:
        options.setdefault("groups", 4)
    return evonorm_core.build_norm_act(name, channels, nonlinearity, **options).double()


def groups_of(layer):
    return layer.groups if isinstance(layer, GroupedNormAct2d) else None


def test_every_paper_layer_is_registered():
    assert set(NAMES) == EXPECTED_NAMES


@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_matches_paper_formula(name, training, nonlinearity):
    gen = torch.Generator().manual_seed(hash(name) % 2**31)
    layer = build(name, nonlinearity=nonlinearity)
    p = randomize(layer, gen)
    layer.train(training)
    x = torch.randn(3, 8, 5, 4, generator=gen, dtype=torch.float64) * 2 + 0.3
    expected = ref.reference(name, nonlinearity)(x, p, layer.eps, training=training, groups=groups_of(layer))
    torch.testing.assert_close(layer(x), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_default_groups_is_32(name):
    layer = evonorm_core.build_norm_act(name, 64)
    if name in ref.GROUPED:
        assert layer.groups == 32
        x = torch.randn(2, 64, 3, 3, dtype=torch.float64)
        p = randomize(layer.double(), torch.Generator().manual_seed(1))
        torch.testing.assert_close(layer(x), ref.reference(name, True)(x, p, 1e-5, groups=32))
    assert layer.eps == 1e-5


@pytest.mark.parametrize("channels,expected", [(64, 32), (96, 32), (48, 24), (24, 24), (20, 20), (40, 20), (3, 3)])
def test_default_groups_lowered_until_they_divide(channels, expected):
    assert evonorm_core.build_norm_act("evonorm_s0", channels).groups == expected


def test_explicit_groups_must_divide():
    with pytest.raises(ValueError, match=r"num_channels=48 is not divisible by groups=32.*\[1, 2, 3, 4, 6, 8, 12, 16, 24, 48\]"):
        evonorm_core.build_norm_act("evonorm_s0", 48, groups=32)
    with pytest.raises(ValueError, match="groups must be a positive int"):
        evonorm_core.build_norm_act("gn_relu", 48, groups=0)


@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT))
def test_moving_average_update(name):
    """running = (1 - m) * running + m * batch, variance unbiased: the nn.BatchNorm2d rule."""
    momentum = 0.3
    layer = build(name, momentum=momentum)
    bn = torch.nn.BatchNorm2d(8, momentum=momentum).double()
    x = torch.randn(4, 8, 3, 5, dtype=torch.float64) * 3 + 1
    for _ in range(3):
        layer(x)
        bn(x)
    torch.testing.assert_close(layer.running_var, bn.running_var)
    if hasattr(layer, "running_mean"):
        torch.testing.assert_close(layer.running_mean, bn.running_mean)
    assert int(layer.num_batches_tracked) == 3
    layer.eval()
    before = layer.running_var.clone()
    layer(x)
    torch.testing.assert_close(layer.running_var, before)


@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT))
def test_batch_dependence_train_vs_eval(name):
    """Training output of a sample depends on the rest of the batch; eval output does not."""
    layer = build(name)
    x = torch.randn(4, 8, 3, 3, dtype=torch.float64)
    other = torch.cat([x[:1], 5 * torch.randn(3, 8, 3, 3, dtype=torch.float64)])
    assert not torch.allclose(layer(x)[:1], layer(other)[:1])
    layer.eval()
    torch.testing.assert_close(layer(x)[:1], layer(other)[:1])


@pytest.mark.parametrize("name", sorted(set(NAMES) - ref.BATCH_DEPENDENT))
def test_sample_based_layers_are_batch_independent(name):
    layer = build(name)
    assert not isinstance(layer, BatchStatsNormAct2d)
    x = torch.randn(4, 8, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(layer(x)[1:2], layer(x[1:2]))


@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0"])
def test_nonlinearity_off_is_plain_affine_without_extra_state(name):
    layer = build(name, nonlinearity=False)
    assert {n for n, _ in layer.named_parameters()} == {"weight", "bias"}
    assert not list(layer.buffers())


def test_evonorm_b0_scale_invariant_in_training():
    layer = build("evonorm_b0", eps=1e-30)
    randomize(layer, torch.Generator().manual_seed(3))
    x = torch.randn(4, 8, 5, 5, dtype=torch.float64)
    for a in (1e-3, 0.5, 7.0, 1e4):
        torch.testing.assert_close(layer(a * x), layer(x), rtol=1e-12, atol=1e-12)


def test_evonorm_s0_asymptotics():
    """For large |x|: x / group_std(x) where v1 * x > 0, and 0 where v1 * x < 0 (paper 5.6, E.3)."""
    layer = build("evonorm_s0", groups=2)
    with torch.no_grad():
        layer.v1.copy_(torch.tensor([1.0, -1.0, 2.0, -0.5, 0.7, -3.0, 1.5, -1.0], dtype=torch.float64))
    x = torch.randn(2, 8, 4, 4, dtype=torch.float64)
    x = x + 0.2 * torch.sign(x)  # keep |x| away from 0
    a = 1e3
    limit = torch.where(ref.ch(layer.v1) * x > 0, x / torch.sqrt(ref.grouped(ref.s2, x, 2)), torch.zeros_like(x))
    torch.testing.assert_close(layer(a * x), limit, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_gradcheck(name, nonlinearity):
    layer = build(name, channels=4, nonlinearity=nonlinearity, **({"groups": 2} if name in ref.GROUPED else {}))
    randomize(layer, torch.Generator().manual_seed(5))
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    buffers = dict(layer.named_buffers())
    x = torch.randn(3, 4, 3, 2, dtype=torch.float64, requires_grad=True)

    def f(x, *ps):  # fresh copies of the buffers: moving averages must not drift between evaluations
        state = {**dict(zip(names, ps)), **{k: v.clone() for k, v in buffers.items()}}
        return torch.func.functional_call(layer, state, (x,))

    for training in (True, False):
        layer.train(training)
        assert torch.autograd.gradcheck(f, (x, *params))


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    layer = build(name)
    randomize(layer, torch.Generator().manual_seed(7))
    layer(torch.randn(2, 8, 3, 3, dtype=torch.float64))
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    fresh = build(name)
    fresh.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    for mode in (True, False):
        layer.train(mode), fresh.train(mode)
        x = torch.randn(2, 8, 3, 3, dtype=torch.float64)
        torch.testing.assert_close(fresh(x), layer(x))


def test_reset_parameters_restores_paper_initialisation():
    layer = build("evonorm_b0")
    randomize(layer, torch.Generator().manual_seed(1))
    layer(torch.randn(2, 8, 3, 3, dtype=torch.float64))
    layer.reset_parameters()
    assert torch.all(layer.weight == 1) and torch.all(layer.bias == 0) and torch.all(layer.v1 == 1)
    assert torch.all(layer.running_var == 1) and int(layer.num_batches_tracked) == 0
    frn = build("frn")
    randomize(frn, torch.Generator().manual_seed(1))
    frn.reset_parameters()
    assert torch.all(frn.v0 == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_under_autocast(name, dtype):
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    layer = evonorm_core.build_norm_act(name, 8, groups=4) if name in ref.GROUPED else evonorm_core.build_norm_act(name, 8)
    x = torch.randn(2, 3, 6, 6)
    with torch.autocast("cpu", dtype=dtype):
        h = conv(x)
        y = layer(h)
    assert h.dtype == dtype and y.dtype == dtype
    expected = layer(h.float())  # float32 statistics of the same half-precision input
    torch.testing.assert_close(y.float(), expected, rtol=1e-2, atol=1e-2)
    y.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1, 8, 1, 1), (1, 8, 4, 4), (5, 8, 1, 1)])
def test_no_nan_for_single_sample_or_pixel(name, shape):
    layer = build(name).float()
    x = torch.randn(shape, requires_grad=True)
    for training in (True, False):
        layer.train(training)
        y = layer(x)
        y.sum().backward()
        assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
        assert all(torch.isfinite(b).all() for b in layer.buffers() if b.is_floating_point())


@pytest.mark.parametrize("name", NAMES)
def test_channels_last(name):
    layer = build(name).float()
    x = torch.randn(2, 8, 5, 3)
    expected = layer(x)
    torch.testing.assert_close(layer(x.to(memory_format=torch.channels_last)), expected)


def test_bad_inputs_have_clear_errors():
    layer = evonorm_core.build_norm_act("evonorm_s0", 8)
    with pytest.raises(ValueError, match=r"expects an NCHW tensor \(4 dims\), got shape \(2, 8\)"):
        layer(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"built for 8 channels, got input of shape \(2, 6, 3, 3\)"):
        layer(torch.randn(2, 6, 3, 3))
    with pytest.raises(ValueError, match="num_channels must be a positive int, got 0"):
        evonorm_core.build_norm_act("evonorm_b0", 0)
    with pytest.raises(ValueError, match="eps must be a finite positive number, got -1"):
        evonorm_core.build_norm_act("evonorm_b0", 8, eps=-1)
    with pytest.raises(ValueError, match=r"momentum must be in \(0, 1\] or None \(cumulative average\), got 1.5"):
        evonorm_core.build_norm_act("evonorm_b0", 8, momentum=1.5)
