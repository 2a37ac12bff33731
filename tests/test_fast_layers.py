"""The fused EvoNorms (``impl="fused"``, evonorm_core.ops) against float64 paper formulas.

float64 inputs run the eager kernels (gradcheck); float32 / half inputs on CPU run the C
kernels, compared against the float64 reference. CUDA (compiled / Triton) tests need a GPU.
"""
import pytest
import torch

import evonorm_core
from evonorm_core import ops
from evonorm_core.ops import cpu_library

from . import paper_reference as ref

EVONORMS = ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1", "evonorm_b2"]
B_SERIES = [n for n in EVONORMS if "_b" in n]
# (shape, groups): groups dividing C, the default 32 lowered (36 -> 18), batch 1, 1x1 spatial
CASES = [((3, 8, 5, 4), 4), ((2, 36, 3, 3), None), ((1, 6, 4, 3), 3), ((4, 6, 1, 1), 2)]


def needs_cpu_kernels():
    if cpu_library.load() is None:
        pytest.skip("the C kernels could not be built on this machine (no C compiler?)")


def make_pair(name, channels, groups=None, nonlinearity=True, dtype=torch.float64):
    """A fused layer with random parameters and running_var, and the reference ``p`` dict."""
    options = {"groups": groups} if "_s" in name else {}
    layer = evonorm_core.build_norm_act(name, channels, nonlinearity, **options).to(dtype)
    with torch.no_grad():
        for pname, param in layer.named_parameters():
            param.copy_(torch.randn(channels) * 0.6 + (1.0 if pname in ("weight", "v1") else 0.0))
        if getattr(layer, "running_var", None) is not None:
            layer.running_var.copy_(torch.rand(channels) + 0.5)
    p = {{"weight": "gamma", "bias": "beta"}.get(k, k): v.detach().double().clone() for k, v in [*layer.named_parameters(), *layer.named_buffers()]}
    return layer, p


def expected(name, layer, p, x, training, nonlinearity=True):
    fn = ref.reference(name, nonlinearity)
    return fn(x.double(), p, layer.eps, training=training, groups=getattr(layer, "groups", None))


def test_fused_is_the_default_and_reference_stays_available():
    fused = evonorm_core.build_norm_act("evonorm_s0", 8)
    reference = evonorm_core.build_norm_act("EvoNorm-S0", 8, impl="reference")
    assert fused.impl == "fused" and reference.impl == "reference"
    assert "impl=reference" in repr(reference)
    with pytest.raises(ValueError, match=r"impl must be one of \['fused', 'reference'\], got 'triton'"):
        evonorm_core.build_norm_act("evonorm_b0", 8, impl="triton")


MODES = [(name, True) for name in EVONORMS] + [(name, False) for name in B_SERIES]


@pytest.mark.parametrize("shape,groups", CASES)
@pytest.mark.parametrize("name,training", MODES)
def test_gradcheck_float64(name, training, shape, groups):
    layer, p = make_pair(name, shape[1], groups)
    layer.train(training)
    x = (torch.randn(shape, dtype=torch.float64) * 1.5 + 0.3).requires_grad_()
    torch.testing.assert_close(layer(x), expected(name, layer, p, x, training), rtol=1e-10, atol=1e-10)
    params = tuple(layer.parameters())

    def f(x, *values):
        return torch.func.functional_call(layer, {n: v for (n, _), v in zip(layer.named_parameters(), values)}, (x,))

    if training and name in B_SERIES:  # each call updates running_var; gradcheck calls many times
        layer.momentum = 1e-12
    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("name", EVONORMS)
def test_nonlinearity_off_is_cheap_affine(name):
    layer, p = make_pair(name, 8, 4, nonlinearity=False)
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(layer(x), expected(name, layer, p, x, True, nonlinearity=False))
    assert torch.autograd.gradcheck(layer, (x,), fast_mode=True)
    assert saved_bytes(layer, x) <= 1.1 * x.numel() * x.element_size()


def grads(layer, x, g):
    y = layer(x)
    return (y, *torch.autograd.grad(y, (x, *layer.parameters()), g))


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape,groups", CASES)
@pytest.mark.parametrize("name", EVONORMS)
def test_cpu_kernels_float32_match_float64_reference(name, shape, groups, training, layout):
    needs_cpu_kernels()
    layer, p = make_pair(name, shape[1], groups, dtype=torch.float32)
    layer64 = evonorm_core.build_norm_act(name, shape[1], impl="reference", **({"groups": groups} if "_s" in name else {}))
    layer64.load_state_dict(layer.state_dict())
    layer64.double().train(training)
    layer.train(training)
    x = (torch.randn(shape) * 1.5 + 0.3).contiguous(memory_format=layout).requires_grad_()
    g = torch.randn(shape)
    x64 = x.detach().double().requires_grad_()
    assert ops.select_kernels(x).name == "cpu"
    for got, want in zip(grads(layer, x, g), grads(layer64, x64, g.double())):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    if training and name in B_SERIES:
        torch.testing.assert_close(layer.running_var.double(), layer64.running_var, rtol=1e-5, atol=1e-6)
        assert layer.num_batches_tracked.item() == layer64.num_batches_tracked.item() == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s2", "evonorm_b0", "evonorm_b1"])
def test_half_inputs_use_float32_statistics(name, dtype):
    layer, p = make_pair(name, 8, 4, dtype=torch.float32)
    x = (torch.randn(2, 8, 16, 16) * 3 + 1).to(dtype).requires_grad_()
    y = layer(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), expected(name, layer, p, x.detach(), True), rtol=2e-2, atol=2e-2)
    y.float().sum().backward()
    assert x.grad.dtype == dtype and layer.weight.grad.dtype == torch.float32
    assert saved_bytes(layer, x.detach().requires_grad_()) <= 1.1 * x.numel() * x.element_size()


@pytest.mark.parametrize("name", B_SERIES)
def test_eval_uses_running_var_without_gradient(name):
    layer, p = make_pair(name, 8, dtype=torch.float32)
    layer.eval()
    before = layer.running_var.clone()
    x = torch.randn(3, 8, 4, 4, requires_grad=True)
    layer(x).sum().backward()
    assert torch.equal(layer.running_var, before) and layer.running_var.grad is None
    assert layer.num_batches_tracked.item() == 0
    assert x.grad is not None and layer.weight.grad is not None


def saved_bytes(layer, x):
    sizes = {}

    def pack(t):
        sizes[t.untyped_storage().data_ptr(), t.storage_offset()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    return sum(sizes.values())


@pytest.mark.parametrize("name", EVONORMS)
def test_keeps_about_the_input_bytes_for_backward(name):
    x = torch.randn(4, 64, 16, 16, requires_grad=True)
    fused = saved_bytes(evonorm_core.build_norm_act(name, 64), x)
    reference = saved_bytes(evonorm_core.build_norm_act(name, 64, impl="reference"), x)
    assert fused <= 1.1 * x.numel() * x.element_size() < reference / 3


@pytest.mark.parametrize("name,training", MODES)
def test_gradgradcheck_float64(name, training):
    layer, _ = make_pair(name, 6, 3)
    layer.train(training)
    layer.momentum = 1e-12
    x = (torch.randn(2, 6, 3, 2, dtype=torch.float64) + 0.3).requires_grad_()

    def f(x, *values):
        return torch.func.functional_call(layer, {n: v for (n, _), v in zip(layer.named_parameters(), values)}, (x,))

    assert torch.autograd.gradgradcheck(f, (x, *layer.parameters()), fast_mode=True, atol=1e-5)


def test_gradient_penalty_matches_reference_in_float32():
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    penalties = []
    for impl in ("fused", "reference"):
        torch.manual_seed(1)
        layer = evonorm_core.build_norm_act("evonorm_b0", 8, impl=impl)
        (gx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
        penalties.append(torch.autograd.grad(gx.square().sum(), (x, layer.v1)))
    for a, b in zip(*penalties):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_backends_agree_and_bad_backend_is_named(monkeypatch):
    needs_cpu_kernels()
    layer = evonorm_core.build_norm_act("evonorm_s0", 16)
    x = torch.randn(2, 16, 5, 5, requires_grad=True)
    g = torch.randn_like(x)
    on_cpu = grads(layer, x, g)
    monkeypatch.setenv("EVONORM_BACKEND", "eager")
    assert ops.select_kernels(x).name == "eager"
    for a, b in zip(on_cpu, grads(layer, x, g)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("EVONORM_BACKEND", "triton")
    with pytest.raises(ValueError, match=r"EVONORM_BACKEND='triton'.*accepted: \['auto', 'cpu', 'compiled', 'eager'\]"):
        layer(x)


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_nan_input_propagates(name):
    needs_cpu_kernels()
    x = torch.randn(2, 8, 4, 4)
    x[1, 3, 2, 2] = float("nan")
    y = evonorm_core.build_norm_act(name, 8, **({"groups": 4} if "_s" in name else {}))(x)
    assert torch.isnan(y[1, 3, 2, 2])
    other_groups = [0, 1, 4, 5, 6, 7]  # neither the channel (batch statistic) nor the group of the NaN
    assert torch.isfinite(y[:, other_groups]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("name", EVONORMS)
def test_cuda_compiled_path_matches_reference(name, layout):
    layer, p = make_pair(name, 32, 8, dtype=torch.float32)
    layer = layer.cuda()
    x = (torch.randn(4, 32, 9, 7, device="cuda") * 1.5 + 0.3).contiguous(memory_format=layout).requires_grad_()
    assert ops.select_kernels(x).name == "compiled"
    reference = evonorm_core.build_norm_act(name, 32, impl="reference", **({"groups": 8} if "_s" in name else {}))
    reference.load_state_dict(layer.state_dict())
    g = torch.randn_like(x)
    x64 = x.detach().double().requires_grad_()
    for got, want in zip(grads(layer, x, g), grads(reference.cuda().double(), x64, g.double())):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_cuda_bf16_autocast(name):
    layer = evonorm_core.build_norm_act(name, 32).cuda()
    conv = torch.nn.Conv2d(3, 32, 3).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(conv(torch.randn(4, 3, 16, 16, device="cuda")))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1"])
def test_near_constant_planes_keep_exact_statistics(name, channels_last):
    """|mean| >> std (e.g. RoI features of a flat region): sums of x^2 would cancel to a wrong variance.

    Compared with the float64 reference on the same float32 input; the backward of such an
    ill-conditioned input is only good to a few percent in float32 (the composed float32
    reference is no better), the forward to float32 precision.
    """
    options = {"groups": 8} if name.startswith("evonorm_s") else {}
    fused = evonorm_core.build_norm_act(name, 32, **options)
    exact = evonorm_core.build_norm_act(name, 32, impl="reference", **options).double()
    x = 149.0 + 1e-4 * torch.randn(4, 32, 7, 7, generator=torch.Generator().manual_seed(0))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    xf, xd = x.clone().requires_grad_(), x.double().requires_grad_()
    yf, yd = fused(xf), exact(xd)
    g = torch.randn(yf.shape, generator=torch.Generator().manual_seed(1))
    yf.backward(g), yd.backward(g.double())
    torch.testing.assert_close(yf.double(), yd, rtol=1e-5, atol=1e-5 * yd.abs().max().item())
    torch.testing.assert_close(xf.grad.double(), xd.grad, rtol=0.1, atol=0.1 * xd.grad.abs().max().item())
