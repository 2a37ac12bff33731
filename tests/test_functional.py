"""evonorm_core.functional against the float64 paper formulas: both impls, every weight form,
the running-variance update, and clear errors for bad arguments."""
import pytest
import torch

from evonorm_core import formulas, ops
from evonorm_core import functional as EF
from evonorm_core import statistics as stats

from . import eager_nodes
from . import paper_reference as ref
from .distributed_world import GROUP, World

S_SERIES = {"evonorm_s0": dict(v1=True, centered=True), "evonorm_s1": dict(v1=False, centered=True),
            "evonorm_s2": dict(v1=False, centered=False)}
B_SERIES = {"evonorm_b0": "b0", "evonorm_b1": "b1", "evonorm_b2": "b2"}
WEIGHTS = ["none", "channel", "sample"]


def affine_params(kind, n, c, dtype=torch.float32):
    """(weight, bias) of the kind, and the (N or 1, C, 1, 1) float64 gamma/beta to apply by hand."""
    if kind == "none":
        return None, None, torch.ones(1, c, 1, 1, dtype=torch.float64), torch.zeros(1, c, 1, 1, dtype=torch.float64)
    shape = (c,) if kind == "channel" else (n, c)
    w, b = torch.randn(shape, dtype=dtype) * 0.5 + 1, torch.randn(shape, dtype=dtype) * 0.5
    view = (lambda t: t.double().view(1, c, 1, 1)) if kind == "channel" else (lambda t: t.double()[:, :, None, None])
    return w, b, view(w), view(b)


def unit_params(c, v1=None, running_var=None):
    p = {"gamma": torch.ones(c, dtype=torch.float64), "beta": torch.zeros(c, dtype=torch.float64)}
    if v1 is not None:
        p["v1"] = v1.double()
    if running_var is not None:
        p["running_var"] = running_var.double()
    return p


@pytest.mark.parametrize("impl", EF.IMPLS)
@pytest.mark.parametrize("kind", WEIGHTS)
@pytest.mark.parametrize("name", list(S_SERIES))
def test_evonorm_s_matches_paper(name, kind, impl):
    n, c, groups = 3, 12, 4
    x = torch.randn(n, c, 9, 7) * 1.5 + 0.3
    w, b, gamma, beta = affine_params(kind, n, c)
    v1 = torch.rand(c) + 0.5 if S_SERIES[name]["v1"] else None
    y = EF.evonorm_s(x, w, b, v1, groups=groups, eps=1e-3, centered=S_SERIES[name]["centered"], impl=impl)
    want = ref.reference(name, True)(x.double(), unit_params(c, v1), 1e-3, groups=groups) * gamma + beta
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("impl", EF.IMPLS)
@pytest.mark.parametrize("kind", WEIGHTS)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", list(B_SERIES))
def test_evonorm_b_matches_paper_and_updates_running_var(name, training, kind, impl):
    n, c = 4, 6
    x = torch.randn(n, c, 5, 6) * 1.5 + 0.3
    w, b, gamma, beta = affine_params(kind, n, c)
    v1 = torch.rand(c) + 0.5 if name == "evonorm_b0" else None
    running_var, tracked = torch.rand(c) + 0.5, torch.tensor(3)
    before = running_var.clone()
    y = EF.evonorm_b(x, w, b, v1, running_var, tracked, variant=B_SERIES[name], training=training,
                     momentum=0.25, eps=1e-3, impl=impl)
    p = unit_params(c, v1, before)
    want = ref.reference(name, True)(x.double(), p, 1e-3, training=training) * gamma + beta
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)
    if training:  # BatchNorm's rule: unbiased batch variance, weight momentum
        unbiased = x.double().var(dim=(0, 2, 3), unbiased=True)
        torch.testing.assert_close(running_var.double(), 0.75 * before.double() + 0.25 * unbiased, rtol=1e-6, atol=1e-7)
        assert tracked.item() == 4
    else:
        assert torch.equal(running_var, before) and tracked.item() == 3


def test_momentum_none_is_a_cumulative_average():
    running_var, tracked = torch.ones(4), torch.tensor(0)
    batches = [torch.randn(3, 4, 5, 5) * s for s in (1.0, 2.0, 3.0)]
    for x in batches:
        EF.evonorm_b(x, None, None, None, running_var, tracked, variant="b2", training=True, momentum=None, eps=1e-5)
    want = torch.stack([x.double().var(dim=(0, 2, 3)) for x in batches]).mean(0)
    torch.testing.assert_close(running_var.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_per_sample_affine_gradients_match_reference(name):
    """Class-conditional layers: the per-sample (N, C) weight and bias get per-sample gradients."""
    n, c = 3, 8
    x = torch.randn(n, c, 6, 5, dtype=torch.float64)
    w = (torch.randn(n, c, dtype=torch.float64) * 0.3 + 1)
    b = torch.randn(n, c, dtype=torch.float64) * 0.3
    v1 = torch.rand(c, dtype=torch.float64) + 0.5
    grads = []
    for impl in EF.IMPLS:
        inputs = [t.clone().requires_grad_() for t in (x, w, b, v1)]
        if name == "evonorm_s0":
            y = EF.evonorm_s(*inputs, groups=4, eps=1e-5, impl=impl)
        else:
            y = EF.evonorm_b(*inputs, torch.ones(c, dtype=torch.float64), None, variant="b0", training=True,
                             momentum=0.1, eps=1e-5, impl=impl)
        grads.append(torch.autograd.grad(y, inputs, torch.cos(torch.arange(y.numel(), dtype=y.dtype)).view_as(y)))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("impl", EF.IMPLS)
def test_empty_batch_leaves_running_var_and_gives_zero_gradients(impl):
    """As nn.BatchNorm2d: no update; every parameter still gets a (zero) gradient, as DDP expects."""
    running_var, tracked = torch.ones(4), torch.tensor(0)
    w, b, v1 = (torch.rand(4, requires_grad=True) for _ in range(3))
    y = EF.evonorm_b(torch.empty(0, 4, 3, 3), w, b, v1, running_var, tracked, variant="b0", training=True,
                     momentum=0.1, eps=1e-5, impl=impl)
    assert y.shape == (0, 4, 3, 3) and tracked.item() == 0 and torch.equal(running_var, torch.ones(4))
    y.sum().backward()
    assert all(torch.equal(t.grad, torch.zeros(4)) for t in (w, b, v1))
    x = torch.empty(2, 4, 0, 3, requires_grad=True)
    y = EF.evonorm_s(x, w, None, v1, groups=2, eps=1e-5, impl=impl)
    assert y.shape == (2, 4, 0, 3)
    y.sum().backward()
    assert x.grad.shape == x.shape


FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("param_dtype", FLOATS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_affine_takes_parameters_in_any_float_dtype(dtype, param_dtype):
    """As evonorm_s/b do: F.batch_norm refuses e.g. a float64 input with float32 parameters
    (an EvoNorm with nonlinearity=False on a float64 input); those take composed ops."""
    x = torch.randn(2, 4, 3, 3).to(dtype).requires_grad_()
    w, b = (torch.randn(4).to(param_dtype).requires_grad_() for _ in range(2))
    y = EF.affine(x, w, b)
    assert y.dtype == dtype
    want = x.double() * w.double().view(1, -1, 1, 1) + b.double().view(1, -1, 1, 1)
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-6)  # the output's rounding
    torch.testing.assert_close(y.double(), want, atol=tol, rtol=tol)
    y.sum().backward()
    assert x.grad.dtype == dtype and w.grad.dtype == param_dtype and b.grad.dtype == param_dtype


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda x: EF.evonorm_s(x, None, None, None, groups=3, eps=1e-5), r"groups must be a positive int dividing the 8"),
        (lambda x: EF.evonorm_s(x, None, None, None, groups=2, eps=0.0), r"eps must be a finite positive number, got 0.0"),
        (lambda x: EF.evonorm_s(x, None, None, None, groups=2, eps=1e-5, impl="triton"),
         r"impl must be one of \['fused', 'reference'\], got 'triton'"),
        (lambda x: EF.evonorm_s(x, torch.ones(3, 8), None, None, groups=2, eps=1e-5),
         r"weight must be None, \(8,\) or per sample \(2, 8\) .* got shape \(3, 8\)"),
        (lambda x: EF.evonorm_s(x[0], None, None, None, groups=2, eps=1e-5), r"expects an NCHW tensor"),
        (lambda x: EF.evonorm_s(x.long(), None, None, None, groups=2, eps=1e-5), r"floating-point input .*got dtype torch.int64"),
        (lambda x: EF.evonorm_b(x, None, None, None, None, None, variant="b3", training=True, momentum=0.1, eps=1e-5),
         r"unknown variant 'b3'; accepted: \['b0', 'b1', 'b2'\]"),
        (lambda x: EF.evonorm_b(x, None, None, None, None, None, variant="b0", training=True, momentum=0.1, eps=1e-5),
         r"variant 'b0' needs v1 of shape \(8,\), got None"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call(torch.randn(2, 8, 3, 3))


class _Calls(torch.nn.Module):
    """Calls the functional API the way the layers do: through the module's namespace."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running_var", torch.ones(8))
        self.register_buffer("num_batches_tracked", torch.tensor(0))
        self.v1 = torch.nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x, w):
        y = EF.evonorm_s(x, w, None, self.v1, groups=4, eps=1e-5)
        y = EF.evonorm_b(y, w, None, self.v1, self.running_var, self.num_batches_tracked, variant="b0",
                         training=self.training, momentum=0.1, eps=1e-5)
        return EF.affine(y, w, None)


def test_fx_symbolic_trace_records_one_node_per_call():
    module = _Calls()
    traced = torch.fx.symbolic_trace(module)
    targets = [n.target for n in traced.graph.nodes if n.op == "call_function"]
    assert [t.__name__ for t in targets] == ["evonorm_s", "evonorm_b", "affine"]
    x, w = torch.randn(2, 8, 4, 4), torch.rand(2, 8) + 0.5
    eager, copy = _Calls(), _Calls()
    copy.load_state_dict(eager.state_dict())
    torch.testing.assert_close(torch.fx.symbolic_trace(copy)(x, w), eager(x, w))
    torch.testing.assert_close(copy.running_var, eager.running_var)
    assert copy.num_batches_tracked.item() == 1


# ---- evonorm_core.formulas: the dtype contract its docstrings state (float64 stays, every other float is
# computed in float32; parameters follow x, whatever their own dtype), and S's default (centered: S0/S1).
# The layers cast their output back to the input's dtype, so only these direct calls see it.

@pytest.mark.parametrize("dtype", FLOATS)
def test_formulas_compute_in_float32_unless_float64(dtype):
    x = (torch.randn(2, 3, 4, 4) * 3).to(dtype)
    want = torch.float64 if dtype == torch.float64 else torch.float32
    assert formulas.compute_dtype(x) == want
    up = formulas.upcast(x)
    assert up.dtype == want and torch.equal(up.double(), x.double())


def test_to_nchw_views_channel_and_per_sample_tensors_in_the_dtype_given():
    assert formulas.to_nchw(None, torch.float32) is None  # "None stays None"
    t = formulas.to_nchw(torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64), torch.float32)
    assert t.dtype == torch.float32 and t.shape == (3, 1, 1) and t.flatten().tolist() == [1.5, -2.0, 0.25]
    t = formulas.to_nchw(torch.arange(6, dtype=torch.float16).view(2, 3), torch.float64)
    assert t.dtype == torch.float64 and t.shape == (2, 3, 1, 1) and t.flatten().tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("param_dtype", [torch.float64, torch.float16])
def test_formulas_compute_in_x_dtype_whatever_the_parameters_dtype(param_dtype):
    """x in float32, v1 / batch variance / gamma / beta in float64 or float16: every formula returns
    float32 (a float64 parameter would otherwise promote it), against the float64 paper formulas."""
    n, c, groups, eps = 3, 6, 3, 1e-3
    x = torch.randn(n, c, 5, 4) * 1.5 + 0.3
    v1 = (torch.rand(c, dtype=torch.float64) + 0.5).to(param_dtype)
    batch_var = (torch.rand(c, dtype=torch.float64) + 0.5).to(param_dtype)
    p = unit_params(c, v1, batch_var)
    xd = x.double()

    def check(got, want):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)

    # s_transform's default is centered (the group variance: S0 with v1, S1 without), not S2's mean square
    check(formulas.s_transform(x, v1, groups, eps), ref.evonorm_s0(xd, p, eps, groups=groups))
    check(formulas.s_transform(x, None, groups, eps), ref.evonorm_s1(xd, p, eps, groups=groups))
    check(formulas.s_transform(x, None, groups, eps, centered=False), ref.evonorm_s2(xd, p, eps, groups=groups))
    check(formulas.b_instance_term(x, v1, "b0", eps),
          ref.ch(p["v1"]) * xd + torch.sqrt(ref.s2(xd, ref.INSTANCE) + eps))
    for variant in B_SERIES:  # batch_var given: the eval path (the moving average)
        check(formulas.b_transform(x, v1, batch_var, B_SERIES[variant], eps), ref.reference(variant, True)(xd, p, eps, False))
    gamma = (torch.randn(c, dtype=torch.float64) * 0.5 + 1).to(param_dtype)
    beta = (torch.randn(n, c, dtype=torch.float64) * 0.5).to(param_dtype)  # per sample
    check(formulas.apply_affine(x, gamma, None), xd * ref.ch(gamma.double()))
    check(formulas.apply_affine(x, None, beta), xd + beta.double()[:, :, None, None])
    check(formulas.apply_affine(x, gamma, beta), xd * ref.ch(gamma.double()) + beta.double()[:, :, None, None])


def test_tracked_batch_moments_are_the_batch_s_in_training_and_the_moving_averages_in_eval(monkeypatch):
    """The moving averages come back in the input's dtype (float32 buffers, float64 input), the mean only where
    one is tracked; training uses this process's batch alone unless ``sync`` is asked for, even in a group of two."""
    world = World(monkeypatch)
    running_mean, running_var, tracked = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 3.0]), torch.tensor(0)
    x = torch.randn(3, 2, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 + 1
    mean, var = EF.tracked_batch_moments(x, running_mean, running_var, tracked, False, 0.1)
    assert mean.dtype == var.dtype == torch.float64
    assert torch.equal(mean, running_mean.double()) and torch.equal(var, running_var.double())
    assert EF.tracked_batch_moments(x, None, running_var, tracked, False, 0.1)[0] is None
    mean, var = EF.tracked_batch_moments(x, running_mean, running_var, tracked, True, 0.1)
    assert world.sent == [] and int(tracked) == 1
    torch.testing.assert_close(mean, x.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(var, x.var(dim=(0, 2, 3), unbiased=False))


def _affine_by_hand(x, weight, bias):
    """x * weight + bias in float64, each per channel (C,) or per sample (N, C)."""
    out = x.double()
    for t, combine in ((weight, torch.mul), (bias, torch.add)):
        if t is not None:
            out = combine(out, t.double().view(t.shape[0] if t.dim() == 2 else 1, -1, 1, 1))
    return out


AFFINE_PARAMS = [None, (torch.float32, False), (torch.float64, False), (torch.float32, True)]  # (dtype, per sample)


def _affine_param(spec, gen):
    """None, or a random weight/bias of AFFINE_PARAMS' ``(dtype, per sample)`` for 3 samples of 4 channels."""
    return None if spec is None else torch.randn((3, 4) if spec[1] else (4,), generator=gen).to(spec[0])


@pytest.mark.parametrize("bias", AFFINE_PARAMS)
@pytest.mark.parametrize("weight", AFFINE_PARAMS)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_affine_is_x_times_weight_plus_bias_in_the_inputs_dtype(x_dtype, weight, bias):
    """Every mix of absent, per-channel and per-sample weight and bias, in the input's dtype or another: F.batch_norm's
    path where it takes the dtypes, composed ops elsewhere, the same values."""
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(3, 4, 2, 5, generator=gen) * 2 + 0.5).to(x_dtype)
    w, b = _affine_param(weight, gen), _affine_param(bias, gen)
    out = EF.affine(x, w, b)
    assert out.dtype == x_dtype and out.shape == x.shape
    if w is None and b is None:
        assert out is x
    tol = {torch.bfloat16: 2e-2, torch.float32: 1e-6, torch.float64: 1e-12}[x_dtype]
    torch.testing.assert_close(out.double(), _affine_by_hand(x, w, b), rtol=tol, atol=tol)


def test_affine_runs_on_the_parameters_device_and_names_a_misplaced_one():
    """On the meta device (F.batch_norm's zero mean and unit variance made beside the parameters); a parameter on
    another device than the input is refused by name, before any kernel reads it."""
    x = torch.empty(2, 4, 3, 3, device="meta")
    for w, b in ((torch.ones(4, device="meta"), None), (None, torch.zeros(4, device="meta"))):
        out = EF.affine(x, w, b)
        assert out.is_meta and out.shape == x.shape
    cpu = torch.randn(2, 4, 3, 3)
    moved = r"is on meta but the input is on cpu; move the layer to the input's device \(layer.to\('cpu'\)\)$"
    with pytest.raises(ValueError, match=rf"^affine: weight {moved}"):
        EF.affine(cpu, torch.ones(4, device="meta"), torch.zeros(4))
    with pytest.raises(ValueError, match=rf"^affine: bias {moved}"):
        EF.affine(cpu, torch.ones(4), torch.zeros(4, device="meta"))


def test_affine_shape_errors_name_the_function_and_the_argument():
    x = torch.randn(2, 4, 3, 3)
    shapes = r"must be None, \(4,\) or per sample \(2, 4\) for input of shape \(2, 4, 3, 3\), got shape"
    with pytest.raises(ValueError, match=rf"^affine: weight {shapes} \(3,\)$"):
        EF.affine(x, torch.ones(3), torch.zeros(4))
    with pytest.raises(ValueError, match=rf"^affine: bias {shapes} \(2, 4, 1\)$"):
        EF.affine(x, torch.ones(4), torch.zeros(2, 4, 1))
    with pytest.raises(ValueError, match=r"^affine: impl must be one of \['fused', 'reference'\], got 'bogus'$"):
        EF.affine(x, torch.ones(4), torch.zeros(4), impl="bogus")


class Capture:
    """What _fused_forward asks torch about program capture, set by the test; and the kernel loads it asks for."""

    def __init__(self, monkeypatch, compiling=False, exporting=False, tracing=False, onnx=False, loaded=True):
        EF.ops.load("cpu")  # the torch.ops.evonorm operators exist from the first load on
        self.loads: list = []
        self.asked: list = []  # the device types asked about
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
        monkeypatch.setattr(torch.compiler, "is_exporting", lambda: exporting)
        monkeypatch.setattr(torch.jit, "is_tracing", lambda: tracing)
        monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: onnx)
        monkeypatch.setattr(EF.ops, "is_loaded", lambda device_type: self.asked.append(device_type) or loaded)
        monkeypatch.setattr(EF.ops, "load", self.loads.append)


SMALLEST = EF.COMPILED_OPERATOR_MIN_NUMEL["cpu"]


@pytest.mark.parametrize("context, numel, expected", [
    ({}, 8, "eager entry"),  # eager with gradients: the operator's eager autograd entry
    ({"tracing": True}, 8, "operator"),  # torch.jit.trace: one node per layer, whatever the size
    ({"compiling": True, "exporting": True}, 8, "operator"),  # torch.export: the same
    ({"compiling": True}, SMALLEST, "operator"),  # torch.compile from COMPILED_OPERATOR_MIN_NUMEL elements
    ({"compiling": True}, SMALLEST - 1, None),  # below it, the formula Inductor fuses
    ({"compiling": True, "exporting": True, "onnx": True}, SMALLEST, None),  # ONNX: plain ONNX ops
    ({"tracing": True, "onnx": True}, SMALLEST, None),
])
def test_the_fused_path_chooses_the_operator_by_how_the_program_is_captured(monkeypatch, context, numel, expected):
    capture = Capture(monkeypatch, **context)
    x = torch.empty(1, 1, 1, numel)
    choices = {"eager entry": EF.ops.library.s_forward_eager, "operator": torch.ops.evonorm.s_forward, None: None}
    assert EF._fused_forward(x, "s_forward") is choices[expected]
    # under capture the kernels are loaded (load() is folded at trace time), in eager only when not yet loaded
    assert capture.loads == (["cpu"] if context.get("compiling") or context.get("exporting") else [])


def test_the_fused_path_in_eager_loads_the_inputs_device_kernels_and_skips_autograd_without_gradients(monkeypatch):
    capture = Capture(monkeypatch, loaded=False)
    x = torch.empty(2, 8, 4, 4, device="meta")
    with torch.no_grad():
        assert EF._fused_forward(x, "b_forward") is ops.library.b_forward_no_grad  # the operator past its autograd
    assert capture.loads == ["meta"] and capture.asked == ["meta"]
    capture_cpu = Capture(monkeypatch, compiling=True, loaded=False)
    assert EF._fused_forward(x, "b_forward") is None  # a device without a compiled-operator threshold: the formula
    assert capture_cpu.loads == ["meta"]


def is_eager_entry_node(node, op: str) -> bool:
    """Whether ``node`` is what ``library.<op>_eager`` records: its C++ node with the C++ kernels, else (CUDA, no
    kernels) its Python autograd function's."""
    return node.name() in (eager_nodes.cpp_node(op), eager_nodes.python_node(op))


@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_the_evonorm_functionals_run_the_implementation_asked_for(impl):
    """impl="fused": the operator (its autograd node on the output); "reference": the composed formula (the
    affine: an eval-mode batch norm)."""
    x = torch.randn(2, 8, 3, 3, requires_grad=True)
    ones, zeros = torch.ones(8), torch.zeros(8)
    outputs = {"affine_forward": EF.affine(x, ones.expand(2, 8), zeros, impl=impl),  # per sample: any size
               "s_forward": EF.evonorm_s(x, ones, zeros, ones, groups=4, eps=1e-5, impl=impl),
               "b_forward": EF.evonorm_b(x, ones, zeros, ones, ones.clone(), torch.tensor(0), variant="b0",
                                         training=True, momentum=0.1, eps=1e-5, impl=impl)}
    for op, y in outputs.items():
        assert is_eager_entry_node(y.grad_fn, op) is (impl == "fused"), y.grad_fn.name()


@pytest.mark.parametrize("numel, weight_shape, weight_dtype", [
    (16, (8,), torch.float32),  # per channel, planes of one value
    (272, (8,), torch.float32),
    (272, (2, 8), torch.float32),  # per sample, which F.batch_norm does not take
    (272, (8,), torch.float64),  # float64 parameters of a float32 input: the same
])
def test_the_eager_affine_runs_the_operator_at_every_size(numel, weight_shape, weight_dtype):
    """Eager on the CPU the affine is the operator (through its C++ autograd node, faster than the eval-mode batch
    norm at every size measured), with gradients and without."""
    x = torch.randn(2, 8, 1, numel // 16, requires_grad=True)
    weight, bias = torch.rand(weight_shape, dtype=weight_dtype) + 0.5, torch.randn(8, dtype=weight_dtype)
    y = EF.affine(x, weight, bias)
    assert is_eager_entry_node(y.grad_fn, "affine_forward"), y.grad_fn.name()
    with torch.no_grad():
        torch.testing.assert_close(EF.affine(x, weight, bias), y.detach())
    want = x.detach().double() * weight.double().reshape(*weight.shape, 1, 1) + bias.double().reshape(8, 1, 1)
    torch.testing.assert_close(y.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("context", [{"compiling": True}, {"compiling": True, "exporting": True}, {"tracing": True}])
def test_program_capture_sees_the_affine_as_a_batch_norm(monkeypatch, context):
    """Under capture the affine is F.batch_norm, which Inductor fuses with its neighbours and CUDA runs in one
    kernel each way, never the operator (an opaque call to Inductor)."""
    Capture(monkeypatch, **context)
    y = EF.affine(torch.randn(2, 8, 3, 3, requires_grad=True), torch.ones(8), torch.zeros(8))
    assert "BatchNorm" in y.grad_fn.name(), y.grad_fn.name()


def _evonorm_s(**changes):
    ones = torch.ones(8)
    args = {"x": torch.randn(2, 8, 3, 3), "weight": ones, "bias": ones - 1, "v1": ones, "groups": 4, "eps": 1e-5}
    return EF.evonorm_s(**{**args, **changes})


def _evonorm_b(**changes):
    ones = torch.ones(8)
    args = {"x": torch.randn(2, 8, 3, 3), "weight": ones, "bias": ones - 1, "v1": ones, "running_var": ones.clone(),
            "num_batches_tracked": torch.tensor(0), "variant": "b0", "training": True, "momentum": 0.1, "eps": 1e-5}
    return EF.evonorm_b(**{**args, **changes})


ON_META = r"is on meta but the input is on cpu; move the layer to the input's device \(layer.to\('cpu'\)\)$"
SHAPES = r"must be None, \(8,\) or per sample \(2, 8\) for input of shape \(2, 8, 3, 3\), got shape \(3,\)$"
GROUPS = r"^evonorm_s: groups must be a positive int dividing the 8 channels, got "


@pytest.mark.parametrize("call, changes, message", [
    (_evonorm_s, {"eps": 0.0}, r"^evonorm_s: eps must be a finite positive number, got 0.0$"),
    (_evonorm_s, {"impl": "bogus"}, r"^evonorm_s: impl must be one of \['fused', 'reference'\], got 'bogus'$"),
    (_evonorm_s, {"groups": 0}, GROUPS + "0$"),
    (_evonorm_s, {"groups": 3}, GROUPS + "3$"),
    (_evonorm_s, {"groups": True}, GROUPS + "True$"),
    (_evonorm_s, {"groups": 4.0}, GROUPS + "4.0$"),
    (_evonorm_s, {"weight": torch.ones(3)}, "^evonorm_s: weight " + SHAPES),
    (_evonorm_s, {"bias": torch.ones(3)}, "^evonorm_s: bias " + SHAPES),
    (_evonorm_s, {"v1": torch.ones(3)}, r"^evonorm_s: v1 must be None or \(8,\), got shape \(3,\)$"),
    *[(_evonorm_s, {name: torch.ones(8, device="meta")}, f"^evonorm_s: {name} " + ON_META)
      for name in ("weight", "bias", "v1")],
    (_evonorm_b, {"eps": -1.0}, r"^evonorm_b: eps must be a finite positive number, got -1.0$"),
    (_evonorm_b, {"impl": "bogus"}, r"^evonorm_b: impl must be one of \['fused', 'reference'\], got 'bogus'$"),
    (_evonorm_b, {"variant": "b3"}, r"^evonorm_b: unknown variant 'b3'; accepted: \['b0', 'b1', 'b2'\]$"),
    (_evonorm_b, {"v1": torch.ones(3)}, r"^evonorm_b: variant 'b0' needs v1 of shape \(8,\), got \(3,\)$"),
    (_evonorm_b, {"v1": None}, r"^evonorm_b: variant 'b0' needs v1 of shape \(8,\), got None$"),
    (_evonorm_b, {"weight": torch.ones(3)}, "^evonorm_b: weight " + SHAPES),
    (_evonorm_b, {"bias": torch.ones(3)}, "^evonorm_b: bias " + SHAPES),
    (_evonorm_b, {"running_var": torch.ones(3)}, r"^evonorm_b: running_var must have shape \(8,\), got \(3,\)$"),
    *[(_evonorm_b, {name: torch.ones(8, device="meta")}, f"^evonorm_b: {name} " + ON_META)
      for name in ("weight", "bias", "v1", "running_var")],
    (_evonorm_b, {"num_batches_tracked": torch.tensor(0, device="meta")}, "^evonorm_b: num_batches_tracked " + ON_META),
])
def test_the_evonorm_functionals_name_themselves_and_the_bad_argument(call, changes, message):
    with pytest.raises(ValueError, match=message):
        call(**changes)


def test_batch_statistics_are_this_process_s_unless_sync_is_asked_for(monkeypatch):
    """evonorm_b and batch_norm called without ``sync`` in a group of two send nothing; with it, one all-reduce."""
    world = World(monkeypatch)
    x = torch.randn(2, 8, 3, 3)
    _evonorm_b(x=x)
    EF.batch_norm(x, None, None, torch.zeros(8), torch.ones(8), torch.tensor(0), True, 0.1, 1e-5)
    assert world.sent == []
    _evonorm_b(x=x, sync=True)
    EF.batch_norm(x, None, None, torch.zeros(8), torch.ones(8), torch.tensor(0), True, 0.1, 1e-5, sync=True)
    assert len(world.sent) == 2


@pytest.mark.parametrize("bias", AFFINE_PARAMS)
@pytest.mark.parametrize("weight", AFFINE_PARAMS)
@pytest.mark.parametrize("buffers", [torch.float64, torch.float32])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_is_its_formula_for_every_affine_and_buffer_dtype(training, buffers, weight, bias):
    """(x - mean) / sqrt(var + eps) * weight + bias with eps 0.1 (not F.batch_norm's default), float64 input, float64
    or float32 moving averages (F.batch_norm's path or the composed one), every mix of weight and bias; eval reads
    and leaves the moving averages and their count, training counts the batch."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(3, 4, 2, 5, generator=gen, dtype=torch.float64) * 2 + 0.5
    w, b = _affine_param(weight, gen), _affine_param(bias, gen)
    running_mean, running_var = torch.randn(4, generator=gen).to(buffers), torch.rand(4, generator=gen).to(buffers) + 0.5
    tracked = torch.tensor(5)
    mean, var = (x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=False)) if training else \
        (running_mean.double(), running_var.double())
    expected = _affine_by_hand((x - mean.view(1, -1, 1, 1)) / torch.sqrt(var.view(1, -1, 1, 1) + 0.1), w, b)
    before = running_var.clone()
    out = EF.batch_norm(x, w, b, running_mean, running_var, tracked, training, None, 0.1)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=1e-6 if buffers == torch.float32 else 1e-10, atol=1e-6)
    assert int(tracked) == (6 if training else 5) and torch.equal(running_var, before) is not training


@pytest.mark.parametrize("bias", AFFINE_PARAMS)
@pytest.mark.parametrize("weight", AFFINE_PARAMS)
def test_group_norm_is_its_formula_for_every_affine(weight, bias):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, 2, 5, generator=gen, dtype=torch.float64) * 2 + 0.5
    w, b = _affine_param(weight, gen), _affine_param(bias, gen)
    grouped = x.view(3, 2, -1)
    mean = grouped.mean(dim=2, keepdim=True)
    var = grouped.var(dim=2, unbiased=False, keepdim=True)
    z = ((grouped - mean) / torch.sqrt(var + 0.1)).view_as(x)
    out = EF.group_norm(x, 2, w, b, 0.1)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _affine_by_hand(z, w, b), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_evonorm_b_in_eval_reads_the_moving_variance_and_leaves_it(impl):
    x = torch.randn(2, 8, 3, 3, dtype=torch.float64)
    ones = torch.ones(8, dtype=torch.float64)
    running_var, tracked = torch.linspace(0.5, 2.0, 8, dtype=torch.float64), torch.tensor(3)
    out = _evonorm_b(x=x, weight=ones, bias=ones - 1, v1=ones, running_var=running_var, num_batches_tracked=tracked,
                     training=False, impl=impl)
    p = {"gamma": ones, "beta": ones - 1, "v1": ones, "running_var": running_var}
    torch.testing.assert_close(out, ref.evonorm_b0(x, p, 1e-5, training=False))
    assert int(tracked) == 3 and torch.equal(running_var, torch.linspace(0.5, 2.0, 8, dtype=torch.float64))


@pytest.mark.parametrize("their_shape", [(3, 8, 2, 2), (1, 8, 1, 1), (0, 8, 2, 2)], ids=["3x2x2", "one value", "empty"])
@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_an_empty_batch_under_sync_joins_the_all_reduce_and_counts_the_other_ranks_samples(monkeypatch, impl,
                                                                                          their_shape):
    """A rank without samples still takes part in the all-reduce of its process group (the others would wait for
    it) and folds the whole batch's variance, the other rank's, into its moving average, unless no rank had a
    sample; its output is empty, and every parameter gets a (zero) gradient."""
    world = World(monkeypatch, size=1, sizes={GROUP: 2})
    theirs = torch.randn(their_shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2
    stats.batch_moments(theirs, sync=True, process_group=GROUP)  # what the other rank sends
    world.other = world.sent.pop()[0]
    ones = torch.ones(8, dtype=torch.float64)
    weight, bias, v1 = (t.clone().requires_grad_() for t in (ones, ones - 1, ones))
    running_var, tracked = ones.clone(), torch.tensor(0)
    x = torch.empty(0, 8, 2, 2, dtype=torch.float64, requires_grad=True)
    out = _evonorm_b(x=x, weight=weight, bias=bias, v1=v1, running_var=running_var, num_batches_tracked=tracked,
                     sync=True, process_group=GROUP, impl=impl)
    assert out.shape == (0, 8, 2, 2) and [group for _, group in world.sent] == [GROUP]
    out.sum().backward()
    assert all(torch.equal(t.grad, torch.zeros(8, dtype=torch.float64)) for t in (weight, bias, v1))
    if not theirs.numel():
        assert int(tracked) == 0 and torch.equal(running_var, ones)
        return
    single = theirs.numel() == 8  # one value per channel: its variance 0, stored as is (no unbiasing by 0/0)
    var = torch.zeros(8, dtype=torch.float64) if single else theirs.var(dim=(0, 2, 3), unbiased=True)
    assert int(tracked) == 1
    torch.testing.assert_close(running_var, 0.9 + 0.1 * var)


@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_evonorm_b_in_eval_under_sync_sends_nothing_and_keeps_its_averages(monkeypatch, impl):
    """Eval reads the moving variance: no all-reduce (the other ranks may not call one), empty batch or not."""
    world = World(monkeypatch)
    ones = torch.ones(8, dtype=torch.float64)
    for x in (torch.randn(2, 8, 3, 3, dtype=torch.float64), torch.empty(0, 8, 3, 3, dtype=torch.float64)):
        running_var, tracked = ones.clone(), torch.tensor(0)
        _evonorm_b(x=x, weight=ones, bias=ones - 1, v1=ones, running_var=running_var, num_batches_tracked=tracked,
                   training=False, sync=True, impl=impl)
        assert world.sent == [] and int(tracked) == 0 and torch.equal(running_var, ones)


def test_evonorm_b_keeps_a_bfloat16_input_s_dtype_on_both_paths():
    x = torch.randn(2, 8, 3, 3).bfloat16()
    for impl in ("fused", "reference"):
        assert _evonorm_b(x=x, impl=impl).dtype == torch.bfloat16


def test_the_functionals_refuse_what_is_not_a_tensor_by_its_type():
    with pytest.raises(ValueError, match=r"^evonorm_s expects an NCHW tensor \(4 dims\), got list$"):
        _evonorm_s(x=[[1.0]])
    with pytest.raises(ValueError, match=r"^evonorm_b expects an NCHW tensor \(4 dims\), got shape \(2, 8\)$"):
        _evonorm_b(x=torch.randn(2, 8))


@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_evonorm_s_defaults_to_the_centred_group_variance_and_keeps_a_bfloat16_input_s_dtype(impl):
    """Without ``centered`` it is S0's (and S1's) group variance, not S2's mean square; a bfloat16 input gives a
    bfloat16 output, computed in float32."""
    x = torch.randn(2, 8, 3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 1.5
    ones = torch.ones(8, dtype=torch.float64)
    p = {"gamma": ones, "beta": ones - 1, "v1": ones}
    out = EF.evonorm_s(x, ones, ones - 1, ones, groups=4, eps=1e-5, impl=impl)
    torch.testing.assert_close(out, ref.evonorm_s0(x, p, 1e-5, training=True, groups=4))
    half = EF.evonorm_s(x.bfloat16(), ones.float(), ones.float() - 1, ones.float(), groups=4, eps=1e-5, impl=impl)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.double(), out, rtol=2e-2, atol=2e-2)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # a trace specializes shapes: expected here
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning")
@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_evonorm_b_traced_by_torch_jit_updates_the_moving_variance_as_in_eager(impl):
    """Under torch.jit.trace sizes are tensors: the batch count is made an int again, so the traced function
    unbiases the variance (count / (count - 1)) and counts the batch exactly as eager code does."""
    ones = torch.ones(8, dtype=torch.float64)

    def step(x, running_var, tracked):
        return _evonorm_b(x=x, weight=ones, bias=ones - 1, v1=ones, running_var=running_var,
                          num_batches_tracked=tracked, impl=impl)

    x = torch.randn(2, 8, 3, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    traced = torch.jit.trace(step, (x, ones.clone(), torch.tensor(0)), check_trace=False)
    (eager_var, eager_count), (traced_var, traced_count) = (ones.clone(), torch.tensor(0)), (ones.clone(), torch.tensor(0))
    torch.testing.assert_close(traced(x, traced_var, traced_count), step(x, eager_var, eager_count))
    torch.testing.assert_close(traced_var, eager_var)
    assert int(traced_count) == int(eager_count) == 1
