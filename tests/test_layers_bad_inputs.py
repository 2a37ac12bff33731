"""Bad inputs to the layers, the registry and conversion: clear errors, or what PyTorch's own norms do."""
import pytest
import torch
from torch import nn

import evonorm_core

from . import paper_reference as ref

NAMES = evonorm_core.list_norm_acts()


def build(name, nonlinearity=True, **options):
    if name in ref.GROUPED:
        options.setdefault("groups", 4)
    return evonorm_core.build_norm_act(name, 8, nonlinearity, **options)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool, torch.complex64])
@pytest.mark.parametrize("name", NAMES)
def test_integer_bool_and_complex_inputs_are_refused(name, dtype):
    layer = build(name)
    x = torch.ones(2, 8, 3, 3, dtype=dtype)
    with pytest.raises(ValueError, match=rf"expects a real floating-point input .* got dtype {dtype}"):
        layer(x)


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), 0.0, -1e-5, True, "1e-5", None])
@pytest.mark.parametrize("name", NAMES)
def test_eps_must_be_finite_and_positive(name, eps):
    with pytest.raises(ValueError, match=r"eps must be a finite positive number, got "):
        build(name, eps=eps)


@pytest.mark.parametrize("momentum", [0.0, -0.1, 1.5, float("nan"), True, "0.1"])
@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT))
def test_momentum_must_be_in_0_1_or_none(name, momentum):
    with pytest.raises(ValueError, match=r"momentum must be in \(0, 1\] or None"):
        build(name, momentum=momentum)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_rank_channels_and_affine_shapes(name):
    layer = build(name)
    with pytest.raises(ValueError, match=r"expects an NCHW tensor \(4 dims\), got shape \(2, 8\)"):
        layer(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"built for 8 channels, got input of shape \(2, 6, 3, 3\)"):
        layer(torch.randn(2, 6, 3, 3))
    x = torch.randn(2, 8, 3, 3)
    shapes = r"must be None, \(8,\) or per sample \(2, 8\) for input of shape \(2, 8, 3, 3\), got shape"
    layer_name = type(layer).__name__  # the layer names itself, not a function it calls
    with pytest.raises(ValueError, match=rf"^{layer_name}: weight {shapes} \(3, 8\)$"):
        layer.forward_affine(x, torch.ones(3, 8), None)
    with pytest.raises(ValueError, match=rf"^{layer_name}: bias {shapes} \(8, 1\)$"):
        layer.forward_affine(x, torch.ones(8), torch.zeros(8, 1))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_num_channels_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=rf"num_channels must be a positive int, got {bad!r}"):
        evonorm_core.build_norm_act("evonorm_s0", bad)


@pytest.mark.parametrize("shape", [(0, 8, 4, 4), (2, 8, 0, 4), (2, 8, 4, 0)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_empty_batches_and_maps_as_pytorch_norms(name, nonlinearity, training, shape):
    """An empty input gives an empty output, every parameter a (zero) gradient, and leaves the
    moving averages as they were (nn.BatchNorm2d keeps them too; a NaN must not get in)."""
    layer = build(name, nonlinearity).train(training)
    with torch.no_grad():
        for b in layer.buffers():
            if b.is_floating_point():
                b.uniform_(0.5, 1.5)
    before = {n: b.clone() for n, b in layer.named_buffers()}
    x = torch.randn(shape, requires_grad=True)
    y = layer(x)
    assert y.shape == shape and y.dtype == x.dtype
    y.sum().backward()
    assert x.grad.shape == shape
    for n, p in layer.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, torch.zeros_like(p)), n
    for n, b in layer.named_buffers():
        assert torch.equal(b, before[n]), n
    bn = nn.BatchNorm2d(8).train(training)
    bn(torch.randn(shape))
    assert torch.equal(bn.running_var, torch.ones(8))  # what PyTorch does, for comparison


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_an_empty_batch_keeps_its_dtype_with_or_without_affine(name, training, dtype):
    """Without weight and bias there is nothing to tie the empty output to but the statistics; in bfloat16 the
    empty output is bfloat16, as a non-empty one is."""
    x = torch.randn(0, 8, 4, 4, dtype=dtype, requires_grad=True)
    for affine in (False, True):
        y = build(name, affine=affine).train(training)(x)
        assert y.shape == x.shape and y.dtype == dtype, affine
        y.sum().backward()
        assert x.grad.shape == x.shape


def test_empty_batch_keeps_the_cumulative_average():
    layer = build("bn_relu", momentum=None)
    x = torch.randn(4, 8, 3, 3)
    layer(x)
    layer(torch.randn(0, 8, 3, 3))
    layer(2 * x)
    assert int(layer.num_batches_tracked) == 2  # the empty batch is not counted
    torch.testing.assert_close(layer.running_var, (x.var(dim=(0, 2, 3)) + (2 * x).var(dim=(0, 2, 3))) / 2)


def test_register_refuses_a_taken_name_unless_override(scratch_registry):
    class Mine(nn.Module):
        uses_batch_statistics = False

        def __init__(self, num_channels, nonlinearity=True):
            super().__init__()

    with pytest.raises(ValueError, match=r"cannot register norm-act 'evonorm_s0'.*already taken.*override=True"):
        evonorm_core.register_norm_act("evonorm_s0")(Mine)
    with pytest.raises(ValueError, match=r"'gn' by 'gn_relu'"):
        evonorm_core.register_norm_act("my_layer_x", "GN")(Mine)
    assert "my_layer_x" not in evonorm_core.list_norm_acts()  # nothing half-registered
    evonorm_core.register_norm_act("evonorm_s0", override=True)(Mine)
    assert type(evonorm_core.build_norm_act("EvoNorm-S0", 8)) is Mine
    assert evonorm_core.uses_batch_statistics("evonorm_s0") is False


def test_uses_batch_statistics_of_what_cannot_tell(scratch_registry):
    with pytest.raises(TypeError, match="cannot tell whether .* uses batch statistics without building"):
        evonorm_core.uses_batch_statistics(lambda c, nl: nn.Identity())
    with pytest.raises(KeyError, match="unknown norm-act layer 'nope'"):
        evonorm_core.uses_batch_statistics("nope")

    def factory(num_channels, nonlinearity=True):
        return nn.Identity()

    evonorm_core.register_norm_act("test_undeclared_layer")(factory)
    evonorm_core.register_norm_act("test_declared_layer", batch_statistics=True)(factory)
    with pytest.raises(ValueError, match="does not declare whether it uses batch statistics"):
        evonorm_core.uses_batch_statistics("test_undeclared_layer")
    assert evonorm_core.uses_batch_statistics("test_declared_layer") is True


IMPL_LAYERS = [name for name in NAMES if "impl" in evonorm_core.registry.options_of(name)]
BAD_VALUES = [float("nan"), -1.0, float("inf"), 0.0]
# NCHW planes of 9 values are one masked vector in the kernels' AVX-512 loops (where the machine has them), planes of
# 49 three full vectors and a masked one (the B inference in eval) or vectors across planes (the S backward's runs)
PLANES = {"planes-of-9": (3, 3), "planes-of-49": (7, 7)}


def both_impls(name, prepare):
    """The layer's output with impl="reference" and impl="fused", the same parameters and state, ``prepare``
    applied to each layer before the call."""
    outputs = []
    for impl in ("reference", "fused"):
        torch.manual_seed(0)
        layer = build(name, impl=impl)
        with torch.no_grad():
            for parameter in layer.parameters():
                parameter.copy_(torch.randn_like(parameter) * 0.5 + 1)
        x = prepare(layer)
        with torch.no_grad():
            outputs.append(layer(x))
    return outputs


@pytest.mark.parametrize("plane", PLANES.values(), ids=PLANES.keys())
@pytest.mark.parametrize("bad", BAD_VALUES)
@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT & set(IMPL_LAYERS)))
def test_fused_and_reference_agree_on_a_bad_moving_variance_in_eval(name, bad, plane):
    """A NaN, negative, infinite or zero moving variance in eval: what the composed formula gives (NaN where the
    square root of a negative is taken), the fused kernels give too, channel by channel; nothing is hidden."""
    def prepare(layer):
        layer.eval()
        with torch.no_grad():
            layer.running_var[1] = bad
        return torch.randn(2, 8, *plane, generator=torch.Generator().manual_seed(1))

    reference, fused = both_impls(name, prepare)
    # a zero moving variance leaves sb = sqrt(eps): where B2's q - x comes near it the division magnifies float32
    # rounding, both implementations' (at 7 x 7 up to 3e-5 of the float64 formula's output, relative)
    torch.testing.assert_close(fused, reference, equal_nan=True, rtol=1e-4, atol=1e-5)
    assert torch.isnan(reference[:, 1]).all() == (bad < 0 or bad != bad)
    assert torch.isfinite(reference[:, [0, *range(2, 8)]]).all()


@pytest.mark.parametrize("bad", BAD_VALUES)
@pytest.mark.parametrize("name", sorted(ref.BATCH_DEPENDENT & set(IMPL_LAYERS)))
def test_fused_and_reference_gradients_agree_on_a_bad_moving_variance_in_eval(name, bad):
    """The backward of the case above: the input's and parameters' gradients in eval with a NaN, negative, infinite or
    zero moving variance match the composed formula's, NaN where it has NaN (the NCHW kernels' planes take another
    loop where the channel's batch deviation is NaN)."""
    grads = []
    for impl in ("reference", "fused"):
        torch.manual_seed(0)
        layer = build(name, impl=impl).eval()
        with torch.no_grad():
            for parameter in layer.parameters():
                parameter.copy_(torch.randn_like(parameter) * 0.5 + 1)
            layer.running_var[1] = bad
        x = torch.randn(2, 8, 3, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()
        upstream = torch.randn(2, 8, 3, 3, generator=torch.Generator().manual_seed(2))
        layer(x).backward(upstream)
        grads.append([x.grad, *(p.grad for p in layer.parameters())])
    for fused, reference in zip(grads[1], grads[0]):
        torch.testing.assert_close(fused, reference, equal_nan=True)
    assert torch.isnan(grads[0][0][:, 1]).all() == (bad < 0 or bad != bad)


def with_one_value(bad, training, plane=(3, 3)):
    def prepare(layer):
        layer.train(training)
        x = torch.randn(2, 8, *plane, generator=torch.Generator().manual_seed(1))
        x[0, 2, 1, 1] = bad
        return x
    return prepare


@pytest.mark.parametrize("plane", PLANES.values(), ids=PLANES.keys())
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", IMPL_LAYERS)
def test_fused_and_reference_agree_on_a_nan_input(name, training, plane):
    """One NaN input value: both implementations give the same output, NaN wherever the formula spreads it."""
    reference, fused = both_impls(name, with_one_value(float("nan"), training, plane))
    torch.testing.assert_close(fused, reference, equal_nan=True)
    assert torch.isnan(reference[0, 2, 1, 1])


@pytest.mark.parametrize("plane", PLANES.values(), ids=PLANES.keys())
@pytest.mark.parametrize("bad", [float("inf"), -float("inf")])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", IMPL_LAYERS)
def test_an_infinite_input_is_non_finite_in_both_and_touches_only_its_statistics(name, training, bad, plane):
    """One infinite input value is non-finite in the output of both implementations (NaN or infinite), and neither changes any channel
    outside the statistics it enters (channels 2 and 3: its channel, its group of 2; its batch in training).
    Within those, the composed formula gives 0 for the plane's finite values (x / inf) where the kernels' shifted
    moments give NaN (inf - inf): both flag the input, and matching them would cost every call a check."""
    reference, fused = both_impls(name, with_one_value(bad, training, plane))
    assert not torch.isfinite(reference[0, 2, 1, 1]) and not torch.isfinite(fused[0, 2, 1, 1])
    others = [0, 1, *range(4, 8)]
    torch.testing.assert_close(fused[:, others], reference[:, others])
    assert torch.isfinite(reference[:, others]).all()


def _other_device_cases():
    cases = [("meta", "cpu")]
    cases += [pytest.param(params, inputs, marks=pytest.mark.gpu) for params, inputs in (("cuda", "cpu"), ("cpu", "cuda"))]
    return cases


@pytest.mark.parametrize(("params_on", "input_on"), _other_device_cases())
@pytest.mark.parametrize("nonlinearity", [True, False])
@pytest.mark.parametrize("impl", ["reference", "fused"])
@pytest.mark.parametrize("name", IMPL_LAYERS)
def test_parameters_on_another_device_are_refused_by_both_implementations(name, impl, nonlinearity, params_on, input_on):
    """The fused operators dispatch on the input's device alone: parameters elsewhere (a layer left on the CPU,
    or on the meta device after ``to_empty``-style construction) must not be read as if they were on it. Both
    implementations raise the same ValueError naming the layer and both devices, in training and eval."""
    layer = build(name, nonlinearity, impl=impl).to(params_on)
    x = torch.randn(2, 8, 3, 3, device=input_on)
    moved = rf"is on {params_on}(:0)? but the input is on {input_on}(:0)?; move the layer"
    for training in (True, False):
        layer.train(training)
        with pytest.raises(ValueError, match=rf"^{type(layer).__name__}: \w+ {moved}"):
            layer(x)
