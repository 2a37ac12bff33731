"""Every registered layer against the paper's formulas (float64 references in paper_reference.py)."""
import copy
import io

import pytest
import torch

import evonorm_core
from evonorm_core import layers
from evonorm_core import statistics as S
from evonorm_core.layers import ACTIVATIONS, BatchStatsNormAct2d, GroupedNormAct2d, NormAct2d
from evonorm_core.layers.controls import AffineReLU2d, TanhMaxTanh2d
from evonorm_core.statistics import resolve_groups

from . import paper_reference as ref
from .distributed_world import GROUP, World

NAMES = evonorm_core.list_norm_acts()
EVONORMS = sorted(n for n in NAMES if n.startswith("evonorm_"))
# every layer once per implementation: EvoNorms fused and as composed ops, baselines as they are
NAME_IMPLS = [(n, impl) for n in NAMES for impl in (["fused", "reference"] if n in EVONORMS else [None])]
EXPECTED_NAMES = {
    "evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2",
    "bn_relu", "bn_prelu", "bn_swish1", "bn_swish", "gn_relu", "gn_swish", "frn", "ln_relu",
    "pixelnorm_relu", "rs_rej", "no_norm_relu", "random_rej", "random_sample",
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


def build(name, channels=8, nonlinearity=True, impl=None, **options):
    if name in ref.GROUPED:
        options.setdefault("groups", 4)
    if impl is not None:
        options["impl"] = impl
    return evonorm_core.build_norm_act(name, channels, nonlinearity, **options).double()


def groups_of(layer):
    return layer.groups if isinstance(layer, GroupedNormAct2d) else None


def test_every_paper_layer_is_registered():
    assert set(NAMES) == EXPECTED_NAMES


@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name, impl", NAME_IMPLS)
def test_matches_paper_formula(name, impl, training, nonlinearity):
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    layer = build(name, nonlinearity=nonlinearity, impl=impl)
    p = randomize(layer, gen)
    layer.train(training)
    x = torch.randn(3, 8, 5, 4, generator=gen, dtype=torch.float64) * 2 + 0.3
    expected = ref.reference(name, nonlinearity)(x, p, layer.eps, training=training, groups=groups_of(layer))
    torch.testing.assert_close(layer(x), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(3, 8, 5, 4), (1, 8, 1, 1)], ids=["batch", "one-value-per-channel"])
@pytest.mark.parametrize("name", [n for n in NAMES if build(n).uses_batch_statistics])
def test_training_with_buffers_in_another_dtype_matches_paper_formula(name, shape):
    """Float32 moving averages under a float64 input, or one value per channel, leave ``F.batch_norm``
    for composed ops: the same formula must come out."""
    gen = torch.Generator().manual_seed(sum(map(ord, name)) + len(shape))
    layer = build(name)
    p = randomize(layer, gen)
    for buffer in ("running_mean", "running_var"):
        if getattr(layer, buffer, None) is not None:
            setattr(layer, buffer, getattr(layer, buffer).float())
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + 0.3
    expected = ref.reference(name, True)(x, p, layer.eps, training=True, groups=groups_of(layer))
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
@pytest.mark.parametrize("name, impl", NAME_IMPLS)
def test_gradcheck(name, impl, nonlinearity):
    layer = build(name, channels=4, nonlinearity=nonlinearity, impl=impl, **({"groups": 2} if name in ref.GROUPED else {}))
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


@pytest.mark.parametrize("channels", [1, 4])
@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_a_single_value_is_its_paper_formula(name, nonlinearity, channels):
    """One sample, a 1x1 map, one channel (or 4 in 4 groups): every per-sample or per-group statistic is over
    one value (variance 0), in training and eval. GroupNorm and LayerNorm give ``beta`` (x - mu = 0) where
    ``F.group_norm`` refuses one value per group."""
    options = {"groups": channels} if name in ref.GROUPED else {}
    for training in (True, False):
        layer = evonorm_core.build_norm_act(name, channels, nonlinearity, **options).double().train(training)
        p = randomize(layer, torch.Generator().manual_seed(3))
        x = torch.linspace(-0.7, 0.9, channels, dtype=torch.float64).view(1, channels, 1, 1).requires_grad_()
        expected = ref.reference(name, nonlinearity)(x.detach(), p, layer.eps, training=training, groups=groups_of(layer))
        y = layer(x)
        torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)
        y.sum().backward()
        assert torch.isfinite(x.grad).all()


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


# ---- the layer contract: forward_affine, affine=False, device/dtype, metadata, folding, fx ----

def per_sample_reference(name, nonlinearity, x, p, eps, training, groups, weight, bias):
    """The paper's formula for sample i with gamma = weight[i], beta = bias[i] (statistics of the whole batch)."""
    f = ref.reference(name, nonlinearity)
    rows = [f(x, {**p, "gamma": weight[i], "beta": bias[i]}, eps, training=training, groups=groups)[i] for i in range(len(x))]
    return torch.stack(rows)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name, impl", NAME_IMPLS)
def test_forward_affine_with_per_sample_gamma_beta(name, impl, training):
    gen = torch.Generator().manual_seed(11)
    layer = build(name, impl=impl)
    p = randomize(layer, gen)
    layer.train(training)
    x = torch.randn(3, 8, 4, 5, generator=gen, dtype=torch.float64) * 2 + 0.3
    weight = torch.randn(3, 8, generator=gen, dtype=torch.float64) + 1
    bias = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    expected = per_sample_reference(name, True, x, p, layer.eps, training, groups_of(layer), weight, bias)
    torch.testing.assert_close(layer.forward_affine(x, weight, bias), expected, rtol=1e-10, atol=1e-10)
    # (C,) weights through forward_affine are forward itself
    layer.train(False)
    torch.testing.assert_close(layer.forward_affine(x, layer.weight, layer.bias), layer(x), rtol=0, atol=0)


@pytest.mark.parametrize("name, impl", NAME_IMPLS)
def test_affine_false_has_no_weight_and_is_gamma_1_beta_0(name, impl):
    layer = build(name, impl=impl, affine=False)
    assert layer.weight is None and layer.bias is None
    assert not {"weight", "bias"} & set(layer.state_dict())
    p = randomize(layer, torch.Generator().manual_seed(2))
    p.update(gamma=torch.ones(8, dtype=torch.float64), beta=torch.zeros(8, dtype=torch.float64))
    x = torch.randn(3, 8, 4, 4, dtype=torch.float64)
    expected = ref.reference(name, True)(x, p, layer.eps, training=True, groups=groups_of(layer))
    torch.testing.assert_close(layer(x), expected, rtol=1e-10, atol=1e-10)
    assert "affine=False" in repr(layer)


@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_parameters_and_buffers_are_created_on_device_and_dtype(name, nonlinearity):
    options = {"groups": 4} if name in ref.GROUPED else {}
    on_meta = evonorm_core.build_norm_act(name, 8, nonlinearity, device="meta", **options)
    tensors = [*on_meta.parameters(), *on_meta.buffers()]
    assert tensors and all(t.is_meta for t in tensors)
    doubled = evonorm_core.build_norm_act(name, 8, nonlinearity, dtype=torch.float64, **options)
    assert all(t.dtype == torch.float64 for t in [*doubled.parameters(), *doubled.buffers()] if t.is_floating_point())
    if hasattr(doubled, "num_batches_tracked"):
        assert doubled.num_batches_tracked.dtype == torch.long
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        evonorm_core.build_norm_act(name, 8, nonlinearity, dtype=torch.int64, **options)


@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_uses_batch_statistics_is_declared_metadata(name, nonlinearity):
    """B series without nonlinearity is the affine x * gamma + beta; every other batch layer keeps its statistics."""
    expected = name in ref.BATCH_DEPENDENT and (nonlinearity or not name.startswith("evonorm_b"))
    assert evonorm_core.uses_batch_statistics(name, nonlinearity) is expected  # nothing built
    layer = build(name, nonlinearity=nonlinearity)
    assert layer.uses_batch_statistics is expected
    assert evonorm_core.uses_batch_statistics(layer) is expected
    assert any(n.startswith("running_") for n, _ in layer.named_buffers()) is expected
    if nonlinearity:
        assert evonorm_core.uses_batch_statistics(evonorm_core.norm_act_factory(name)) is expected
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), layer)
    assert evonorm_core.uses_batch_statistics(model) is expected


@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT))
def test_momentum_none_is_a_cumulative_average(name):
    layer = build(name, momentum=None)
    bn = torch.nn.BatchNorm2d(8, momentum=None).double()
    batches = [torch.randn(4, 8, 3, 5, dtype=torch.float64) * s + s for s in (1.0, 2.0, 3.0)]
    for x in batches:
        layer(x), bn(x)
    unbiased = torch.stack([x.var(dim=(0, 2, 3), unbiased=True) for x in batches]).mean(0)
    torch.testing.assert_close(layer.running_var, unbiased)
    torch.testing.assert_close(bn.running_var, unbiased)
    if hasattr(layer, "running_mean"):
        torch.testing.assert_close(layer.running_mean, torch.stack([x.mean(dim=(0, 2, 3)) for x in batches]).mean(0))
    assert "momentum=None" in repr(layer)


def foldable(name, nonlinearity, training):
    """Per the formulas: BN in eval is an affine before its activation; so is every EvoNorm without
    nonlinearity (x * gamma + beta) and RS + rej without its ReLU in eval; the no-norm ReLU always
    (max(x gamma + beta, 0)), Random and Random + rej without their nonlinearity. Nothing else."""
    if name == "no_norm_relu":
        return True
    if name.startswith("evonorm_") or name in ("random_rej", "random_sample"):
        return not nonlinearity
    if name.startswith("bn_"):
        return not training
    return name == "rs_rej" and not nonlinearity and not training


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_folded_affine(name, nonlinearity, training):
    layer = build(name, nonlinearity=nonlinearity)
    randomize(layer, torch.Generator().manual_seed(4))
    layer.train(training)
    fold = layer.folded_affine()
    assert (fold is not None) is foldable(name, nonlinearity, training)
    if fold is not None:
        x = torch.randn(3, 8, 4, 4, dtype=torch.float64)
        scale, shift = fold
        assert scale.shape == shift.shape == (8,)
        folded = layer.activation_module()(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))
        torch.testing.assert_close(folded, layer(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, nonlinearity", [(n, nl) for n in NAMES for nl in (True, False)
                                                 if build(n).uses_batch_statistics and foldable(n, nl, False)])
def test_folded_affine_is_in_the_parameters_dtype_when_the_moving_averages_are_not(name, nonlinearity):
    """float32 gamma/beta with float64 moving averages (a model cast after its buffers were loaded): the
    fold is float32, as the parameters it replaces, with the float64 fold's values."""
    layer = build(name, nonlinearity=nonlinearity).eval()
    randomize(layer, torch.Generator().manual_seed(6))
    expected = layer.folded_affine()
    for param in layer.parameters():
        param.data = param.data.float()
    fold = layer.folded_affine()
    assert [t.dtype for t in fold] == [torch.float32, torch.float32]
    torch.testing.assert_close(fold, tuple(t.float() for t in expected))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name, impl", NAME_IMPLS)
def test_symbolic_trace(name, impl, training):
    """torch.fx.symbolic_trace sees through every layer (checks run in wrapped functions) and the
    traced module computes, and updates moving averages, as the layer does."""
    layer = build(name, impl=impl).train(training)
    randomize(layer, torch.Generator().manual_seed(5))
    twin = copy.deepcopy(layer)
    traced = torch.fx.symbolic_trace(twin)
    x = torch.randn(3, 8, 4, 4, dtype=torch.float64) * 2 + 1
    torch.testing.assert_close(traced(x), layer(x), rtol=0, atol=0)
    for (n, a), (_, b) in zip(layer.named_buffers(), traced.named_buffers()):
        assert torch.equal(a, b), n
    with pytest.raises(ValueError, match="8 channels"):
        traced(torch.randn(3, 6, 4, 4, dtype=torch.float64))


@pytest.mark.parametrize("name", NAMES)
def test_reset_parameters_restores_every_initial_value(name):
    layer = build(name)
    randomize(layer, torch.Generator().manual_seed(6))
    layer(torch.randn(2, 8, 3, 3, dtype=torch.float64))
    layer.reset_parameters()
    inits = {"weight": 1.0, "bias": 0.0, "v0": 0.0, "v1": 1.0}
    for n, param in layer.named_parameters():
        assert torch.all(param == inits[n]), n
    for n, buffer in layer.named_buffers():
        expected = {"running_mean": 0, "running_var": 1, "num_batches_tracked": 0}[n]
        assert torch.all(buffer == expected), n


@pytest.mark.parametrize("name", NAMES)
def test_extra_repr_names_the_settings(name):
    text = repr(build(name, eps=1e-3))
    assert "8, nonlinearity=True, eps=0.001" in text
    if name in ref.GROUPED:
        assert "groups=4" in text
    if name in ref.BATCH_DEPENDENT:
        assert "momentum=0.1" in text
    if name in EVONORMS:
        assert "impl=fused" in text


# ---- the aggregation statistics of Table 1 (evonorm_core.statistics) against the reference ----

def test_aggregation_statistics_match_table_1():
    """Each statistic is the paper's mu_I / s2_I over its index set I, in a shape that broadcasts:
    (N, C, 1, 1) for instance and group statistics, (N, 1, 1, 1) layer, (N, 1, H, W) pixel, (C,) batch."""
    x = torch.randn(3, 8, 5, 4, dtype=torch.float64) * 2 + torch.arange(8, dtype=torch.float64).view(1, -1, 1, 1)

    def same(got, want):
        torch.testing.assert_close(got.expand_as(x), want, rtol=1e-12, atol=1e-12)

    same(S.instance_var(x), ref.s2(x, ref.INSTANCE))
    same(S.instance_mean_square(x), ref.mu(x**2, ref.INSTANCE))
    mean, var = S.group_moments(x, 4)
    same(mean, ref.grouped(ref.mu, x, 4))
    same(var, ref.grouped(ref.s2, x, 4))
    same(S.group_var(x, 2), ref.grouped(ref.s2, x, 2))
    same(S.group_mean_square(x, 2), ref.grouped(ref.mu, x**2, 2))
    mean, var = S.layer_moments(x)
    same(mean, ref.mu(x, ref.CHANNEL))
    same(var, ref.s2(x, ref.CHANNEL))
    same(S.pixel_mean_square(x), ref.mu(x**2, (1,)))
    assert S.instance_var(x).shape == S.group_var(x, 4).shape == (3, 8, 1, 1)
    assert S.layer_moments(x)[1].shape == (3, 1, 1, 1) and S.pixel_mean_square(x).shape == (3, 1, 5, 4)
    mean, var, count = S.batch_moments(x)
    assert count == 3 * 5 * 4 and mean.shape == var.shape == (8,)
    same(mean.view(1, -1, 1, 1), ref.mu(x, ref.BATCH))
    same(var.view(1, -1, 1, 1), ref.s2(x, ref.BATCH))
    mean, var, count = S.batch_moments(x[:0])
    assert count == 0 and mean.shape == (8,) and torch.isnan(mean).all() and torch.isnan(var).all()


@pytest.mark.parametrize("channels,expected", [(32, 32), (33, 11), (31, 31), (100, 25), (1, 1), (512, 32)])
def test_resolve_groups_default_is_the_largest_divisor_up_to_32(channels, expected):
    assert resolve_groups(channels, None) == expected
    assert resolve_groups(channels, channels) == channels and resolve_groups(channels, 1) == 1


# ---- module-level details: what a layer prints, folds, resets and hands on ----

@pytest.mark.parametrize("name", ["bn_prelu", "bn_swish", "frn"])
def test_activation_module_holds_a_copy_of_the_parameter(name):
    layer = build(name)
    param = "v1" if name == "bn_swish" else "v0"
    with torch.no_grad():
        getattr(layer, param).copy_(torch.linspace(-1, 1, 8, dtype=torch.float64))
    act = layer.activation_module()
    assert isinstance(act, evonorm_core.ChannelActivation) and repr(act).endswith(f"({layer.activation}, num_channels=8)")
    with torch.no_grad():
        getattr(layer, param).fill_(5.0)  # training goes on: the folded activation keeps its values
    torch.testing.assert_close(act.parameter, torch.linspace(-1, 1, 8, dtype=torch.float64))


def test_activation_modules_of_the_plain_activations():
    assert type(build("bn_relu").activation_module()) is torch.nn.ReLU
    assert type(build("bn_swish1").activation_module()) is torch.nn.SiLU
    assert type(build("bn_relu", nonlinearity=False).activation_module()) is torch.nn.Identity
    assert build("gn_swish", nonlinearity=False).activation is None


@pytest.mark.parametrize("name", ["bn_relu", "rs_rej", "evonorm_b0", "evonorm_s0"])
def test_folded_affine_without_affine_is_gamma_1_beta_0(name):
    nonlinearity = name == "bn_relu"
    layer = build(name, nonlinearity=nonlinearity, affine=False)
    randomize(layer, torch.Generator().manual_seed(9))
    layer.eval()
    scale, shift = layer.folded_affine()
    x = torch.randn(2, 8, 3, 3, dtype=torch.float64)
    folded = layer.activation_module()(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))
    torch.testing.assert_close(folded, layer(x), rtol=1e-12, atol=1e-12)
    if name.startswith("evonorm"):
        assert torch.equal(scale, torch.ones(8)) and torch.equal(shift, torch.zeros(8))
    else:  # in the dtype and on the device of the moving averages, the layer's only tensors
        assert scale.dtype == shift.dtype == torch.float64
        on_meta = evonorm_core.build_norm_act(name, 8, nonlinearity, affine=False, device="meta").eval()
        assert all(t.is_meta for t in on_meta.folded_affine())


@pytest.mark.parametrize("name", NAMES)
def test_reset_parameters_without_nonlinearity(name):
    """Without nonlinearity a B-series layer has no moving averages; resetting it must not need them."""
    layer = build(name, nonlinearity=False)
    randomize(layer, torch.Generator().manual_seed(6))
    layer.reset_parameters()
    assert torch.all(layer.weight == 1) and torch.all(layer.bias == 0)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_every_layer_is_its_activation_of_transform_times_gamma_plus_beta(name, nonlinearity, training):
    """NormAct2d's contract, which conversion and the searched layers build on: with gamma and beta per
    channel, layer(x) == activate(transform(x) * gamma + beta) (EvoNorms: no activation after the affine)."""
    gen = torch.Generator().manual_seed(5)
    layer = build(name, nonlinearity=nonlinearity).train(training)
    randomize(layer, gen)
    x = torch.randn(3, 8, 4, 5, generator=gen, dtype=torch.float64) * 2 + 0.3
    expected = layer(x)
    affine = layer.transform(x) * layer.weight.view(1, -1, 1, 1) + layer.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(layer.activate(affine), expected, rtol=1e-10, atol=1e-10)


class _Halved(NormAct2d):
    """A user's own layer on the public base class: x / 2 in front of the affine."""

    def transform(self, x):
        return x / 2


class _GroupedHalved(GroupedNormAct2d):
    def transform(self, x):
        return x / 2


class _BatchVarianceScaled(BatchStatsNormAct2d):
    """x / sqrt(s^2_{b,w,h}(x) + eps): batch statistics without a tracked mean."""

    def transform(self, x):
        mean, var = self.batch_moments(x)
        assert mean is None
        return x / torch.sqrt(var + self.eps)


@pytest.mark.parametrize("cls", [_Halved, _GroupedHalved, _BatchVarianceScaled], ids=lambda c: c.__name__)
def test_the_base_classes_refuse_an_unknown_activation_and_track_no_mean_unless_asked(cls):
    """(Their defaults: test_layer_classes_built_without_options_are_the_paper_layers.)"""
    assert not hasattr(cls(8), "running_mean")
    with pytest.raises(ValueError, match=r"^unknown activation 'bogus'; accepted: \['max_v0', 'relu', 'swish', 'swish1'\]$"):
        cls(8, activation="bogus")


def test_batch_statistics_without_a_tracked_mean_are_the_batch_variance_then_its_moving_average():
    layer = _BatchVarianceScaled(4).double()
    x = torch.randn(3, 4, 2, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64) * 3 + 1
    var = x.var(dim=(0, 2, 3), unbiased=False).view(1, -1, 1, 1)
    torch.testing.assert_close(layer(x), x / torch.sqrt(var + 1e-5))
    moving = 0.9 + 0.1 * x.var(dim=(0, 2, 3), unbiased=True).view(1, -1, 1, 1)
    torch.testing.assert_close(layer.eval()(x), x / torch.sqrt(moving + 1e-5))


@pytest.mark.parametrize("activation", ["max_v0", "swish"])
def test_activations_compute_in_the_input_dtype_whatever_their_parameters_dtype(activation):
    """float64 v0 / v1 (a layer cast to float64) on a float32 input: the activation, and the standalone one
    a fold leaves, stay float32 (the parameter is cast), with the float64 computation's values."""
    layer = _Halved(8, activation=activation).double()
    param = getattr(layer, ACTIVATIONS[activation][1][0])
    with torch.no_grad():
        param.copy_(torch.linspace(-1, 1, 8, dtype=torch.float64))
    z = torch.randn(2, 8, 3, 3, generator=torch.Generator().manual_seed(9))
    expected = ACTIVATIONS[activation][0](z.double(), param.view(1, -1, 1, 1)).float()
    for out in (layer.activate(z), layer.activation_module()(z)):
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, expected)


# every concrete layer class with the activation it has when built with no options (None: none after the affine)
DEFAULT_ACTIVATIONS = {
    layers.EvoNormB0: None, layers.EvoNormB1: None, layers.EvoNormB2: None,
    layers.EvoNormS0: None, layers.EvoNormS1: None, layers.EvoNormS2: None,
    layers.BatchNormAct2d: "relu", layers.GroupNormAct2d: "relu", layers.LayerNormAct2d: "relu",
    layers.PixelNormAct2d: "relu", layers.FilterResponseNorm2d: "max_v0", layers.BatchRMSNormReLU2d: None,
    layers.AffineReLU2d: "relu", layers.TanhMaxTanh2d: None, layers.RandomSample2d: None,
    _Halved: None, _GroupedHalved: None, _BatchVarianceScaled: None,  # a user's own layers on the base classes
}


@pytest.mark.parametrize("cls", DEFAULT_ACTIVATIONS, ids=lambda c: c.__name__)
def test_layer_classes_built_without_options_are_the_paper_layers(cls):
    """The class alone (not the registry, which passes its own options) gives the paper's layer: with its
    nonlinearity and activation, affine (gamma 1, beta 0), eps 1e-5; batch statistics unsynchronized with momentum
    0.1 and an integer batch count; EvoNorms on the fused operators, a bad ``impl`` named as such."""
    layer = cls(8)
    batch_layer = issubclass(cls, BatchStatsNormAct2d)
    assert layer.nonlinearity is True and layer.activation == DEFAULT_ACTIVATIONS[cls]
    assert layer.affine is True and layer.eps == 1e-5
    assert torch.equal(layer.weight, torch.ones(8)) and torch.equal(layer.bias, torch.zeros(8))
    assert cls.uses_batch_statistics_for() is batch_layer and layer.uses_batch_statistics is batch_layer
    if batch_layer:
        assert layer.sync is False and layer.process_group is None and layer.momentum == 0.1
        assert layer.num_batches_tracked.dtype == torch.long
    if cls.__name__.startswith("EvoNorm"):
        assert layer.impl == "fused"
        with pytest.raises(ValueError, match=r"^impl must be one of \['fused', 'reference'\], got 'bogus'$"):
            cls(8, impl="bogus")


@pytest.mark.parametrize("impl", ["fused", "reference"])
@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu", "rs_rej"])
def test_sync_normalizes_with_the_statistics_of_every_rank_through_the_given_group(monkeypatch, name, impl):
    """A B-series layer (and BN-ReLU, RS + rej) built with ``sync=True, process_group=g`` all-reduces its batch moments
    over g: its output and moving averages are those of one layer over both ranks' samples. Without ``sync``
    nothing is sent, even in a group of two. (torch.distributed: tests/distributed_world.py.)"""
    world = World(monkeypatch, size=1, sizes={GROUP: 2})
    gen = torch.Generator().manual_seed(3)
    options = {"impl": impl} if name in EVONORMS else {}
    whole = build(name, **options)
    randomize(whole, gen)
    unsynced, synced, other_rank = (build(name, process_group=GROUP, **options),
                                    *(build(name, sync=True, process_group=GROUP, **options) for _ in range(2)))
    for layer in (unsynced, synced, other_rank):
        layer.load_state_dict(whole.state_dict())
    mine = torch.randn(3, 8, 3, 4, generator=gen, dtype=torch.float64) * 2 + 0.3
    theirs = torch.randn(2, 8, 3, 4, generator=gen, dtype=torch.float64) - 0.5
    unsynced(mine)
    assert world.sent == []
    other_rank(theirs)
    assert [group for _, group in world.sent] == [GROUP]
    world.other = world.sent.pop()[0]
    out = synced(mine)
    expected = whole(torch.cat([mine, theirs]))[:3]
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(synced.running_var, whole.running_var, rtol=1e-10, atol=1e-10)


def test_extra_repr_details():
    assert repr(build("bn_relu")) == "BatchNormAct2d(8, nonlinearity=True, eps=1e-05, activation=relu, momentum=0.1)"
    assert repr(build("bn_prelu", nonlinearity=False, sync=True, affine=False)) == (
        "BatchNormAct2d(8, nonlinearity=False, eps=1e-05, affine=False, momentum=0.1, sync=True)")
    assert repr(build("evonorm_s0", impl="reference")) == (
        "EvoNormS0(8, nonlinearity=True, eps=1e-05, groups=4, impl=reference)")
    assert repr(build("frn")) == "FilterResponseNorm2d(8, nonlinearity=True, eps=1e-05, activation=max_v0)"


@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT))
def test_a_batch_of_one_value_per_channel_is_counted(name):
    """One value per channel (batch 1, a 1x1 map) is a batch like any other: counted, the mean moved toward it,
    the variance toward 0 (nn.BatchNorm2d refuses such a batch in training)."""
    layer = evonorm_core.build_norm_act(name, 4, **({"groups": 4} if name in ref.GROUPED else {})).double()
    x = torch.randn(1, 4, 1, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    layer(x)
    assert int(layer.num_batches_tracked) == 1
    torch.testing.assert_close(layer.running_var, torch.full((4,), 0.9, dtype=torch.float64))
    if hasattr(layer, "running_mean"):
        torch.testing.assert_close(layer.running_mean, 0.1 * x.flatten())


@pytest.mark.parametrize("name", ["bn_relu", "evonorm_b0", "rs_rej"])
def test_moving_averages_start_at_mean_0_variance_1_and_use_momentum_0_1(name):
    """nn.BatchNorm2d's defaults (momentum 0.1; mean 0, variance 1 before any batch): the first batch moves
    the variance to 0.9 * 1 + 0.1 * unbiased batch variance."""
    layer = evonorm_core.build_norm_act(name, 4).double()
    assert torch.equal(layer.running_var, torch.ones(4, dtype=torch.float64))
    assert int(layer.num_batches_tracked) == 0
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64) * 3 + 2
    layer(x)
    torch.testing.assert_close(layer.running_var, 0.9 + 0.1 * x.var(dim=(0, 2, 3), unbiased=True))
    if hasattr(layer, "running_mean"):
        torch.testing.assert_close(layer.running_mean, 0.1 * x.mean(dim=(0, 2, 3)))


def test_controls_by_hand():
    """The no-normalization controls at their initial values: ``no_norm_relu`` is a bare ReLU; ``random_rej``
    is tanh(x) for x >= 0 (max picks x) and tanh(tanh(x)) below (max picks tanh(x)); neither keeps state
    nor depends on the rest of the batch."""
    x = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0], dtype=torch.float64).view(1, 5, 1, 1)
    no_norm, random_rej = (evonorm_core.build_norm_act(n, 5).double() for n in ("no_norm_relu", "random_rej"))
    torch.testing.assert_close(no_norm(x), x.clamp(min=0), rtol=0, atol=0)
    expected = torch.tensor([-0.75950944, -0.43180818, 0.0, 0.46211716, 0.99505475], dtype=torch.float64)
    torch.testing.assert_close(random_rej(x).flatten(), expected, rtol=0, atol=1e-8)
    assert not list(no_norm.buffers()) and not list(random_rej.buffers())
    assert not evonorm_core.uses_batch_statistics("no_norm_relu") and not evonorm_core.uses_batch_statistics("random_rej")
    # built from their classes with no arguments but the channels, they are the same layers (nonlinearity=True)
    torch.testing.assert_close(AffineReLU2d(5).double()(x), x.clamp(min=0), rtol=0, atol=0)
    torch.testing.assert_close(TanhMaxTanh2d(5).double()(x).flatten(), expected, rtol=0, atol=1e-8)
