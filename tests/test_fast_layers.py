"""The fused EvoNorm operators (``torch.ops.evonorm``, evonorm_core.ops) against float64 paper formulas.

Both implementations of the operators are checked: the C++ CPU kernels (through the
registered autograd) and the device-generic PyTorch implementation (called directly; it is
what CUDA and a CPU without a compiler run). Shapes span several accumulation blocks
(planes of 32x32 and 33x31 = 1023 elements against blocks of 256; channels_last with more
than 256 channels, the channel chunk) and tiny planes (7x7, 1x1); layouts NCHW and
channels_last; every accepted dtype; affine absent, per channel or per sample.
"""
import math
import os
import re
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import evonorm_core
from evonorm_core import functional as EF
from evonorm_core import ops
from evonorm_core.ops import library

from . import eager_nodes
from . import paper_reference as ref

EVONORMS = ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1", "evonorm_b2"]
B_SERIES = [n for n in EVONORMS if "_b" in n]
S_OPTIONS = {"evonorm_s0": (True, True), "evonorm_s1": (False, True), "evonorm_s2": (False, False)}  # (v1, centered)

# (shape, groups): several 256-element blocks per plane (32x32, 33x31 odd), a group of many
# tiny planes (7x7; 4 samples: the NCHW S forward's runs of planes, where 3x5 at 2 samples is plane by plane),
# more than one 256-channel chunk in channels_last (320), 1x1 planes, and an odd number of planes per group on
# the NCHW S backward's per-plane path (9x8: it sums planes in pairs).
KERNEL_SHAPES = [((2, 8, 32, 32), 4), ((3, 6, 33, 31), 3), ((4, 64, 7, 7), 8), ((2, 320, 3, 5), 32), ((4, 6, 1, 1), 2),
                 ((2, 9, 9, 8), 3)]
DTYPES = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
LAYOUTS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}
# what the op computes: (layer, training, batch variance given)
MODES = [(n, True, False) for n in EVONORMS] + [(n, False, True) for n in B_SERIES] + [("evonorm_b0", True, True)]
# with the affine operators ("affine": an EvoNorm without its nonlinearity, x gamma + beta), which have C++ and
# generic implementations but no Triton kernel (on CUDA the layers run their affine as F.batch_norm)
CPU_MODES = [*MODES, ("affine", True, False)]


@pytest.fixture(scope="module")
def cpp_kernels():
    status = ops.extension.status()
    if not status.available:
        pytest.skip(f"the C++ kernels could not be built here: {status.detail}")
    ops.load()
    return status


def make_inputs(name, shape, dtype, layout, affine, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n, c = shape[:2]
    x = (torch.randn(shape, generator=gen) * 1.5 + 0.3).to(dtype).contiguous(memory_format=layout)
    pshape = {"none": None, "channel": (c,), "sample": (n, c)}[affine]
    w = None if pshape is None else torch.rand(pshape, generator=gen) + 0.5
    b = None if pshape is None else torch.randn(pshape, generator=gen) * 0.5
    v1 = torch.rand(c, generator=gen) + 0.5 if name in ("evonorm_s0", "evonorm_b0") else None
    batch_var = torch.rand(c, generator=gen) + 0.5
    grad = torch.randn(shape, generator=gen).to(dtype).contiguous(memory_format=layout)
    if dtype == torch.float64:
        w, b, v1, batch_var = (None if t is None else t.double() for t in (w, b, v1, batch_var))
    return x, w, b, v1, batch_var, grad


def paper(name, training, given, x, w, b, v1, batch_var, groups):
    """The float64 paper formula with the affine applied by hand (per channel or per sample)."""
    c = x.shape[1]
    p = {"gamma": torch.ones(c, dtype=torch.float64), "beta": torch.zeros(c, dtype=torch.float64),
         "running_var": batch_var}
    if v1 is not None:
        p["v1"] = v1
    z = x if name == "affine" else ref.reference(name, True)(x, p, 1e-3, training=training and not given, groups=groups)
    shape = (1, c, 1, 1) if w is None or w.dim() == 1 else (x.shape[0], c, 1, 1)
    return z * (1 if w is None else w.view(shape)) + (0 if b is None else b.view(shape))


def expected(name, training, given, x, w, b, v1, batch_var, grad, groups):
    leaves = [None if t is None else t.detach().double().requires_grad_() for t in (x, w, b, v1, batch_var)]
    y = paper(name, training, given, *leaves, groups)
    wanted = [t for t in leaves if t is not None]
    grads = iter(torch.autograd.grad(y, wanted, grad.double(), allow_unused=True))
    return y.detach(), [None if t is None else next(grads) for t in leaves]


def operator_y(name, given, x, w, b, v1, batch_var, groups, entry="operator"):
    """``y`` of the ``torch.ops.evonorm`` operator that computes layer ``name`` (eps 1e-3), called as the operator
    or (``entry="eager"``) through the eager layers' entry point, ``library.<op>_eager``."""
    def forward(op):
        return getattr(torch.ops.evonorm, op) if entry == "operator" else getattr(library, f"{op}_eager")

    if name == "affine":
        return forward("affine_forward")(x, w, b)
    if name in S_OPTIONS:
        return forward("s_forward")(x, w, b, v1, groups, 1e-3, S_OPTIONS[name][1])[0]
    return forward("b_forward")(x, w, b, v1, batch_var if given else None, EF.B_VARIANTS.index(name[-2:]), 1e-3)[0]


def through_operator(name, training, given, x, w, b, v1, batch_var, grad, groups):
    """Forward and backward through ``torch.ops.evonorm`` and its registered autograd."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in (x, w, b, v1, batch_var)]
    y = operator_y(name, given, *leaves, groups)
    y.backward(grad)
    return y, [None if t is None else t.grad for t in leaves]  # batch_var's: None where the operator did not take it


def through_functions(forward_s, backward_s, forward_b, backward_b, name, training, given, x, w, b, v1, batch_var, grad,
                      groups):
    """An implementation's forward and backward functions called directly (same signatures as the operators)."""
    mask = [w is not None, b is not None, v1 is not None]
    if name in S_OPTIONS:
        y, mean, rstd = forward_s(x, w, b, v1, groups, 1e-3, S_OPTIONS[name][1])
        dx, dw, db, dv = backward_s(grad, x, w, b, v1, mean, rstd, groups, S_OPTIONS[name][1], mask)
        dvar = None
    else:
        variant = EF.B_VARIANTS.index(name[-2:])
        y, mean, q, bmean, bvar = forward_b(x, w, b, v1, batch_var if given else None, variant, 1e-3)
        used = batch_var if given else bvar
        dx, dw, db, dv, dvar = backward_b(grad, x, w, b, v1, mean, q, bmean, used, variant, 1e-3, not given, mask + [given])
        dvar = dvar if given else None
    pick = lambda t, wanted: t if wanted else None  # noqa: E731
    return y, [dx, pick(dw, mask[0]), pick(db, mask[1]), pick(dv, mask[2]), dvar]


def through_affine(forward, backward, name, training, given, x, w, b, v1, batch_var, grad, groups):
    """An implementation's affine forward and backward called directly (same signatures as the operators)."""
    mask = [w is not None, b is not None]
    dx, dw, db = backward(grad, x, w, b, mask)
    return forward(x, w, b), [dx, dw if mask[0] else None, db if mask[1] else None, None, None]


def through_generic(*args):
    """The device-generic PyTorch implementation, forward and backward called directly."""
    if args[0] == "affine":
        return through_affine(library.generic_affine_forward, library.generic_affine_backward, *args)
    return through_functions(library.generic_s_forward, library.generic_s_backward, library.generic_b_forward,
                             library.generic_b_backward, *args)


def assert_matches(got_y, got_grads, want_y, want_grads, tol, layout):
    assert got_y.is_contiguous(memory_format=layout)
    scale = lambda t: tol * max(1.0, t.abs().max().item())  # noqa: E731
    torch.testing.assert_close(got_y.double(), want_y, rtol=tol, atol=scale(want_y))
    names = ["dx", "dweight", "dbias", "dv1", "dbatch_var"]
    for name, got, want in zip(names, got_grads, want_grads):
        assert (got is None) == (want is None), name
        if got is not None:
            torch.testing.assert_close(got.double(), want, rtol=tol, atol=scale(want), msg=lambda m: f"{name}: {m}")
    assert got_grads[0].is_contiguous(memory_format=layout)


@pytest.mark.parametrize("affine", ["none", "channel", "sample"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("name,training,given", CPU_MODES)
def test_cpp_kernels_match_paper(cpp_kernels, name, training, given, dtype, layout, affine):
    for i, (shape, groups) in enumerate(KERNEL_SHAPES):
        if affine != "channel" and i not in (0, 3):
            continue  # every shape once with per-channel affine; the other forms on two shapes
        args = make_inputs(name, shape, dtype, LAYOUTS[layout], affine, seed=i)
        want = expected(name, training, given, *args, groups)
        assert_matches(*through_operator(name, training, given, *args, groups), *want, DTYPES[dtype], LAYOUTS[layout])


@pytest.mark.parametrize("torch_threads", [1, 4], indirect=True)
@pytest.mark.parametrize("name", B_SERIES)
def test_b_kernels_with_a_given_variance_match_paper_at_any_thread_count(cpp_kernels, name, torch_threads):
    """With the batch variance given, the B forward reads each plane (channels_last: each sample, when there are
    at least as many samples as threads) for its moments and its output in one task, else in two passes over x:
    3 channels_last samples on 1 thread take the first path, on 4 threads the second; both match the paper."""
    for layout in LAYOUTS.values():
        args = make_inputs(name, (3, 40, 5, 6), torch.float32, layout, "sample", seed=torch_threads)
        want = expected(name, False, True, *args, 1)
        assert_matches(*through_operator(name, False, True, *args, 1), *want, DTYPES[torch.float32], layout)


def forward_and_its_float32_forward_rounded(name, given, x, w, b, v1, batch_var, dtype):
    """The operator's output for x in ``dtype`` (a NaN put at (1, 3, 2, 2): its plane, its group (S), channel 3's
    batch statistics (B training)) and its float32 output for the same values rounded to ``dtype``, checked to agree
    within one unit in the last place (the compiler may contract the two builds' arithmetic differently), NaN where
    the other is."""
    x = x.to(dtype)
    x[1, 3, 2, 2] = float("nan")
    got = operator_y(name, given, x, w, b, v1, batch_var, 4)
    want = operator_y(name, given, x.float(), w, b, v1, batch_var, 4).to(dtype)
    assert torch.equal(got.isnan(), want.isnan()) and bool(got.isnan().any())
    finfo = torch.finfo(dtype)
    torch.testing.assert_close(got, want, rtol=finfo.eps, atol=finfo.smallest_normal * finfo.eps, equal_nan=True)
    return got, want


def assert_subnormals_kept(got, want):
    subnormal = (want != 0) & (want.abs() < torch.finfo(want.dtype).smallest_normal)
    assert bool(subnormal.any()) and bool((got[subnormal] != 0).all())


@pytest.mark.parametrize("dtype,scale", [(torch.bfloat16, 1.0), (torch.float16, 1.0), (torch.bfloat16, 1e-39)],
                         ids=["bfloat16", "float16", "bfloat16-subnormal"])
@pytest.mark.parametrize("name,training,given", CPU_MODES)
def test_forward_of_small_half_precision_planes_is_its_float32_forward_rounded(cpp_kernels, name, training, given,
                                                                               dtype, scale):
    """NCHW planes under 64 values are widened to float32 a run at a time (the B series' runs of planes, the S
    series' groups) and the output narrowed after (bfloat16 with AVX-512 BF16 by vcvtne2ps2bf16, which flushes
    subnormals and quiets NaNs its own way, so blocks holding either take c10's rounding): the output is the float32
    operator's rounded to the nearest, within one unit in the last place (the compiler may contract the two builds'
    arithmetic differently), subnormal outputs kept and NaN planes (S: groups) NaN."""
    x, w, b, v1, batch_var, _ = make_inputs(name, (4, 40, 7, 7), torch.float32, torch.contiguous_format, "none")
    got, want = forward_and_its_float32_forward_rounded(name, given, x * scale, w, b, v1, batch_var, dtype)
    if scale < 1 and given:  # eval: y ~ x / 1, subnormal like x
        assert_subnormals_kept(got, want)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("shape", [(4, 40, 9, 9), (2, 8, 20, 20)], ids=["run-of-planes", "planes-over-256"])
@pytest.mark.parametrize("scale", [1.0, 1e-39], ids=["normal", "subnormal"])
def test_s_forward_in_bfloat16_is_its_float32_forward_rounded_to_nearest_even(cpp_kernels, shape, layout, scale):
    """Where the S loops run on AVX-512 lanes, bfloat16 values are widened in the lanes and the output rounded there
    as c10 rounds (to nearest even, NaN quiet): the float32 operator's output on the same values, rounded, within one
    unit in the last place where the two builds' moments differ in their last bits, and bit for bit almost everywhere
    (a truncating or away-from-zero rounding differs in about half the values); NaN groups NaN, subnormals kept."""
    x, w, b, v1, *_ = make_inputs("evonorm_s0", shape, torch.float32, layout, "channel")
    got, want = forward_and_its_float32_forward_rounded("evonorm_s0", False, x * scale, w, b * scale, v1, None,
                                                        torch.bfloat16)
    finite = ~want.isnan()
    assert (got[finite] == want[finite]).float().mean() > 0.9
    if scale < 1:
        assert_subnormals_kept(got, want)


@pytest.mark.parametrize("torch_threads", [1, 4], indirect=True)
@pytest.mark.parametrize("name", list(S_OPTIONS))
def test_s_kernels_of_small_planes_match_paper_over_chunks_of_samples(cpp_kernels, name, torch_threads):
    """NCHW planes of fewer than 64 values with per-channel parameters take a backward that sums the parameter
    gradients per element over chunks of 256 / HW samples: 300 samples of 1x1 and 40 of 3x3 are two chunks each
    (the second partial); with per-sample parameters the same shapes take the per-plane backward. Both match."""
    for shape, groups in (((300, 8, 1, 1), 4), ((40, 12, 3, 3), 3)):
        for dtype in (torch.float64, torch.float32):
            for affine in ("channel", "sample"):
                args = make_inputs(name, shape, dtype, torch.contiguous_format, affine, seed=torch_threads)
                want = expected(name, True, False, *args, groups)
                got = through_operator(name, True, False, *args, groups)
                assert_matches(*got, *want, DTYPES[dtype], torch.contiguous_format)


@pytest.mark.parametrize("torch_threads", [1, 4], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(S_OPTIONS))
def test_s_forward_over_runs_of_small_planes_matches_paper_where_threads_split_a_group(cpp_kernels, name, dtype,
                                                                                         torch_threads):
    """The NCHW S forward over groups' runs of small planes takes its (sample, group) tasks group by group, each
    thread expanding v, gamma and beta once per group it meets. On 4 threads at::parallel_for splits the 30 tasks of
    10 samples in 3 groups of 32 5x5 planes in two (grain 20), the second from the middle of the second group, and
    the 18 of 6 samples in 3 groups of 80 7x7 planes in four (5, 5, 5 and 3 tasks), three starting inside a group.
    Everything matches the paper on 1 thread and on 4."""
    nchw = torch.contiguous_format
    for i, (shape, groups) in enumerate((((10, 96, 5, 5), 3), ((6, 240, 7, 7), 3))):
        args = make_inputs(name, shape, dtype, nchw, "channel", seed=i)
        want = expected(name, True, False, *args, groups)
        assert_matches(*through_operator(name, True, False, *args, groups), *want, DTYPES[dtype], nchw)


@pytest.mark.parametrize("torch_threads", [1, 4], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,training,given", CPU_MODES)
def test_cpp_kernels_take_a_gradient_in_the_other_layout(cpp_kernels, name, training, given, dtype, torch_threads):
    """A channels_last x with an NCHW gradient (what Inductor passes around depthwise convolutions) is read through
    tiles of 16 rows transposed in 8 x 8 blocks (float32), with edges in both: 63 rows (tiles of 16 and 15), 20 and
    72 channels (blocks of 64 and 8 with remainders), 16 rows of 4x4 planes. An NCHW x with a channels_last gradient
    takes a copy. dx has x's layout either way, and everything matches the paper."""
    for i, (shape, groups) in enumerate((((2, 24, 9, 7), 4), ((2, 20, 5, 5), 5), ((3, 72, 4, 4), 8))):
        for x_layout, grad_layout in ((torch.channels_last, torch.contiguous_format),
                                      (torch.contiguous_format, torch.channels_last)):
            x, w, b, v1, batch_var, grad = make_inputs(name, shape, dtype, x_layout, "channel", seed=i)
            args = (x, w, b, v1, batch_var, grad.contiguous(memory_format=grad_layout))
            want = expected(name, training, given, *args, groups)
            got = through_operator(name, training, given, *args, groups)
            assert_matches(*got, *want, DTYPES[dtype], x_layout)


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (3, 100, 88, 88)), (torch.bfloat16, (3, 160, 96, 96))],
                         ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name,training,given", MODES)
def test_channels_last_rows_of_a_tensor_from_memory_are_read_one_by_one(cpp_kernels, name, training, given, dtype,
                                                                         shape):
    """Channels_last rows of 256 bytes to 2 KiB in an x over 8 MiB are read one by one, not in interleaved groups of
    four (the moments, the B output and the B backward's sums): 9.3 MB of float32 in rows of 400 bytes, 8.8 MB of
    bfloat16 in rows of 320. Everything matches the paper."""
    row = shape[1] * dtype.itemsize
    assert math.prod(shape) * dtype.itemsize > 8 << 20 and 256 <= row < 2048
    cl = torch.channels_last
    args = make_inputs(name, shape, dtype, cl, "channel")
    want = expected(name, training, given, *args, 4)
    assert_matches(*through_operator(name, training, given, *args, 4), *want, DTYPES[dtype], cl)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name,training,given", CPU_MODES)
def test_generic_implementation_matches_paper(name, training, given, layout):
    for i, (shape, groups) in enumerate(KERNEL_SHAPES[:4]):
        for dtype in (torch.float64, torch.float32):
            args = make_inputs(name, shape, dtype, LAYOUTS[layout], ("channel", "sample", "none")[i % 3], seed=i)
            want = expected(name, training, given, *args, groups)
            assert_matches(*through_generic(name, training, given, *args, groups), *want, DTYPES[dtype], LAYOUTS[layout])


def b_backward_args_with_a_nan_batch_variance(variant: int, layout: str) -> tuple:
    """``b_backward``'s arguments for (2, 8, 3, 3) inputs in eval (the batch variance given), channel 1's variance
    NaN, the statistics from the generic forward; every gradient requested."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 3, 3, generator=gen).contiguous(memory_format=LAYOUTS[layout])
    grad = torch.randn(2, 8, 3, 3, generator=gen).contiguous(memory_format=LAYOUTS[layout])
    w, b = torch.randn(8, generator=gen), torch.randn(8, generator=gen)
    v1 = torch.randn(8, generator=gen) if variant == 0 else None
    batch_var = torch.rand(8, generator=gen) + 0.5
    batch_var[1] = float("nan")
    _, mean, q, _, _ = library.generic_b_forward(x, w, b, v1, batch_var, variant, 1e-3)
    return grad, x, w, b, v1, mean, q, torch.empty(0), batch_var, variant, 1e-3, False, [True, True, v1 is not None, True]


def assert_nan_batch_variance_gradients(got: tuple, want: tuple) -> None:
    """``got`` equals ``want`` (b_backward's outputs for b_backward_args_with_a_nan_batch_variance), which is NaN in
    channel 1's dx and, for B0, its dv1, and finite elsewhere."""
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)
    dx, dv1 = want[0], want[3]
    assert dx[:, 1].isnan().all() and dx[:, [0, *range(2, 8)]].isfinite().all()
    assert dv1.numel() == 0 or (dv1[1].isnan() and dv1[[0, *range(2, 8)]].isfinite().all())


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", range(len(EF.B_VARIANTS)))
def test_generic_b_backward_matches_the_kernels_on_a_nan_batch_variance(cpp_kernels, variant, layout):
    """A NaN given batch variance (a moving variance in eval): the generic implementation's gradients equal the C++
    kernels' (which tests/test_layers_bad_inputs.py checks against the composed formula), NaN in that channel's dx
    and, for B0, its dv1: the gradient reaching max(sb, u) goes to both operands where one is NaN."""
    args = b_backward_args_with_a_nan_batch_variance(variant, layout)
    assert_nan_batch_variance_gradients(library.generic_b_backward(*args), torch.ops.evonorm.b_backward(*args))


@pytest.mark.parametrize("x_dtype, p_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                              (torch.float32, torch.float64)], ids=str)
@pytest.mark.parametrize("name,training,given", [("evonorm_s0", True, False), ("evonorm_s2", True, False),
                                                 ("evonorm_b0", True, False), ("evonorm_b0", False, True)])
def test_generic_implementation_computes_in_the_compute_dtype(name, training, given, x_dtype, p_dtype):
    """Every input of the generic implementation is first taken to the compute dtype (float32 unless x is
    float64), parameters of another dtype included: its results are exactly those of the same values given in
    float32, rounded once at the end to x's dtype (y, dx) and to each parameter's (its gradient)."""
    x, w, b, v1, batch_var, grad = make_inputs(name, (3, 8, 5, 4), torch.float64, torch.contiguous_format, "channel")
    given_dtypes = [x_dtype, p_dtype, p_dtype, p_dtype, p_dtype, x_dtype]
    low = [None if t is None else t.to(dtype) for t, dtype in zip((x, w, b, v1, batch_var, grad), given_dtypes)]
    high = [None if t is None else t.float() for t in low]
    got_y, got_grads = through_generic(name, training, given, *low, 4)
    want_y, want_grads = through_generic(name, training, given, *high, 4)
    assert got_y.dtype == x_dtype and torch.equal(got_y, want_y.to(x_dtype))
    for got, want, t in zip(got_grads, want_grads, [low[0], *low[1:5]], strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == t.dtype and torch.equal(got, want.to(t.dtype))


def generic_and_fake_calls(x, w, b, v, batch_var, grad):
    """Each operator's (generic, fake, arguments, gradients computed) for a run with the batch's own variance and
    one with it given, every gradient asked for and only some; "gradients computed" (backward only) says which
    parameter gradients must be non-empty: those asked for, of parameters that are there."""
    y, mean, rstd = library.generic_s_forward(x, w, b, v, 4, 1e-5, True)
    calls = [("s_forward", (x, w, b, v, 4, 1e-5, True), None)]
    for mask in ([True] * 3, [False, True, False]):
        computed = [asked and t is not None for asked, t in zip(mask, (w, b, v))]
        calls.append(("s_backward", (grad, x, w, b, v, mean, rstd, 4, True, mask), computed))
    for given in (None, batch_var):
        y, mean, q, b_mean, b_var = library.generic_b_forward(x, w, b, v, given, 0, 1e-5)
        calls.append(("b_forward", (x, w, b, v, given, 0, 1e-5), None))
        used, from_x = (b_var, True) if given is None else (given, False)
        for mask in ([True] * 4, [False, True, False, False]):
            computed = [asked and t is not None for asked, t in zip(mask, (w, b, v, given))]
            calls.append(("b_backward", (grad, x, w, b, v, mean, q, b_mean, used, 0, 1e-5, from_x, mask), computed))
    calls.append(("affine_forward", (x, w, b), None))
    for mask in ([True, True], [False, True]):
        calls.append(("affine_backward", (grad, x, w, b, mask), [asked and t is not None for asked, t in zip(mask, (w, b))]))
    return [(getattr(library, f"generic_{op}"), getattr(library, f"fake_{op}"), args, computed)
            for op, args, computed in calls]


@pytest.mark.parametrize("affine", ["channel", "none"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_fake_implementation_describes_the_generic_one(dtype, layout, device, affine):
    """torch.compile and export trace with the fake implementation, so each output's shape, dtype, memory
    layout and device must be what the generic implementation returns (statistics float32 for a bf16 input,
    empty tensors for batch statistics that were given and for gradients not asked for; on the input's device,
    meta here, as on a GPU)."""
    inputs = make_inputs("evonorm_b0", (3, 8, 5, 4), dtype, LAYOUTS[layout], affine)
    x, w, b, v, batch_var, grad = (None if t is None else t.to(device) for t in inputs)
    for generic, fake, args, computed in generic_and_fake_calls(x, w, b, v, batch_var, grad):
        real, described = generic(*args), fake(*args)
        if not isinstance(real, tuple):  # affine_forward: y alone
            real, described = (real,), (described,)
        assert all(t.device == x.device for t in real)
        if computed is not None:  # a gradient not asked for, or of an absent parameter, is an empty tensor
            assert [t.numel() > 0 for t in real[1:]] == computed
        assert [(t.shape, t.dtype, t.stride(), t.device) for t in described] == [
            (t.shape, t.dtype, t.stride(), t.device) for t in real]


@pytest.mark.parametrize("op,args", [
    ("s_forward", lambda x, w, b, v: (x, w, b, v, 4, 1e-5, True)),
    ("s_forward", lambda x, w, b, v: (x, None, None, None, 2, 1e-5, False)),
    ("b_forward", lambda x, w, b, v: (x, w, b, v, None, 0, 1e-5)),
    ("b_forward", lambda x, w, b, v: (x, w[0], None, None, torch.rand(8, requires_grad=True) + 0.5, 2, 1e-5)),
    ("affine_forward", lambda x, w, b, v: (x, w, b)),
    ("affine_forward", lambda x, w, b, v: (x, w[0], None)),
])
def test_opcheck(cpp_kernels, op, args):
    """Schema, fake tensors, autograd registration and AOT dispatch agree with the kernels."""
    x = torch.randn(3, 8, 5, 4, requires_grad=True)
    w, b, v = torch.rand(3, 8, requires_grad=True), torch.randn(3, 8, requires_grad=True), torch.rand(8, requires_grad=True)
    torch.library.opcheck(getattr(torch.ops.evonorm, op), args(x, w, b, v))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op,args", [
    ("s_forward", lambda x, w, b, v: (x, w, b, v, 4, 1e-5, True)),
    ("b_forward", lambda x, w, b, v: (x, w, b, v, None, 0, 1e-5)),
])
def test_fake_tensors_match_the_kernels_in_half_precision(cpp_kernels, op, args, dtype):
    """Half inputs: ``y`` in the input's dtype, the statistics in float32 (the kernels accumulate in
    float32); torch.compile/export trace with the fake implementation, so its dtypes and shapes
    must be the kernel's. Checked by ``opcheck`` and directly under ``FakeTensorMode``."""
    torch.manual_seed(0)
    x, w, b, v = (torch.randn(3, 8, 5, 4), torch.rand(3, 8) + 0.5, torch.randn(3, 8), torch.rand(8) + 0.5)
    inputs = [t.to(dtype) for t in (x, w, b, v)]
    real = getattr(torch.ops.evonorm, op)(*args(*inputs))
    assert real[0].dtype == dtype and all(t.dtype == torch.float32 for t in real[1:])
    with FakeTensorMode() as mode:
        fake = getattr(torch.ops.evonorm, op)(*args(*[mode.from_tensor(t) for t in inputs]))
    assert [(t.dtype, t.shape) for t in fake] == [(t.dtype, t.shape) for t in real]
    torch.library.opcheck(getattr(torch.ops.evonorm, op), args(*[t.requires_grad_() for t in inputs]))


@pytest.mark.parametrize("op,args", [
    ("s_forward", lambda x, w, b, v: (x, w, b, v, 4, 1e-5, True)),
    ("s_forward", lambda x, w, b, v: (x.contiguous(memory_format=torch.channels_last), None, b[0], v, 2, 1e-5, False)),
    ("b_forward", lambda x, w, b, v: (x, w, b, v, None, 0, 1e-5)),
    ("b_forward", lambda x, w, b, v: (x.contiguous(memory_format=torch.channels_last), w[0], None, v, None, 0, 1e-5)),
    ("b_forward", lambda x, w, b, v: (x, w[0], b, None, torch.rand(8, dtype=x.dtype) + 0.5, 1, 1e-5)),
    ("b_forward", lambda x, w, b, v: (x, None, b, None, (torch.rand(8, dtype=x.dtype) + 0.5).requires_grad_(), 2, 1e-5)),
    ("affine_forward", lambda x, w, b, v: (x, w, b[0])),
    ("affine_forward", lambda x, w, b, v: (x, w[0], None)),
])
def test_eager_entry_point_is_the_registered_autograd(cpp_kernels, op, args):
    """Eager layers call ``library.<op>_eager`` (on the CPU the C++ autograd node of ``csrc/eager_autograd.cpp``,
    elsewhere the Python autograd function), program capture the registered operator: the same outputs and
    gradients (once, and twice differentiated; absent optional inputs between present ones), and none made for
    statistics."""
    def run(fn, create_graph):
        torch.manual_seed(0)
        x = torch.randn(3, 8, 5, 4, dtype=torch.float64, requires_grad=True)
        w, b, v = (torch.rand(3, 8, dtype=torch.float64) + 0.5, torch.randn(3, 8, dtype=torch.float64),
                   torch.rand(8, dtype=torch.float64))
        inputs = args(x, w.requires_grad_(), b.requires_grad_(), v.requires_grad_())
        out = fn(*inputs)
        out = out if isinstance(out, tuple) else (out,)  # the affine has no statistics
        leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        grads = torch.autograd.grad((out[0] * out[0].detach().cos()).sum(), leaves, create_graph=create_graph)
        if create_graph:
            grads = torch.autograd.grad(sum(g.square().sum() for g in grads), leaves, materialize_grads=True)
        assert all(not t.requires_grad for t in out[1:])
        return [*out, *grads], out[0].grad_fn.name()

    # the module's entry point (made at import) with the node it records on the CPU, its Python autograd function
    # and one made here, where mutation testing sees the factory run
    entries = {getattr(library, f"{op}_eager"): eager_nodes.cpp_node(op),
               library.PYTHON_AUTOGRAD[op]: eager_nodes.python_node(op),
               library._eager_autograd(op).apply: eager_nodes.python_node(op)}
    for create_graph in (False, True):
        want, _ = run(getattr(torch.ops.evonorm, op), create_graph)
        for entry, node in entries.items():
            got, recorded = run(entry, create_graph)
            assert recorded == node
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def s_args(x, w, b, v, stats, grad, groups=4):
    """``s_forward`` and ``s_backward`` arguments (eps 1e-5, centered); ``stats``: the backward's (mean, rstd)."""
    return (x, w, b, v, groups, 1e-5, True), (grad, x, w, b, v, *stats, groups, True, [True] * 3)


def b_args(x, w, b, v, stats, grad, variant=0):
    """``b_forward`` (the variance given) and ``b_backward`` arguments; ``stats``: (mean, q, batch mean, batch
    variance) of the backward, from the batch."""
    return (x, w, b, v, stats[3], variant, 1e-5), (grad, x, w, b, v, *stats, variant, 1e-5, True, [True] * 4)


def operator_pair(request, implementation: str, series: str, forward_args, backward_args):
    """``(forward, backward, forward_args, backward_args)`` of one implementation of a series' operators: the
    C++ CPU kernels, the device-generic functions, the Triton kernels' functions (called on the CPU: they
    check their arguments before launching anything) or the CUDA dispatch."""
    names = [f"{series}_{step}" for step in ("forward", "backward")]
    if implementation == "triton" and series == "affine":
        pytest.skip("the affine operators have no Triton kernel (on CUDA the layers run their affine as F.batch_norm)")
    if implementation == "generic":
        return (*(getattr(library, f"generic_{name}") for name in names), forward_args, backward_args)
    if implementation == "triton":
        kernels = pytest.importorskip("evonorm_core.ops.triton_kernels", reason="Triton is not installed")
        return (*(getattr(kernels, name) for name in names), forward_args, backward_args)
    device = "cuda" if implementation == "cuda" else "cpu"
    if implementation == "cpu":
        request.getfixturevalue("cpp_kernels")
    else:
        ops.load(device)
    moved = ([a.to(device) if isinstance(a, torch.Tensor) else a for a in args] for args in (forward_args, backward_args))
    return (*(getattr(torch.ops.evonorm, name) for name in names), *moved)


def size_check_args(series: str, x: torch.Tensor, **change):
    """Forward and backward arguments of a series on ``x`` (3 x 8 channels), right-sized unless ``change``d."""
    n, c = x.shape[0], 8
    if series == "affine":
        given = {**dict(w=torch.ones(c), b=torch.zeros(c), grad=torch.randn(x.shape)), **change}
        return (x, given["w"], given["b"]), (given["grad"], x, given["w"], given["b"], [True, True])
    groups = change.get("groups", 4)
    good = dict(w=torch.ones(c), b=torch.zeros(c), v=torch.ones(c), grad=torch.randn(x.shape), stats=(
        (torch.zeros(n, groups), torch.ones(n, groups)) if series == "s" else
        (torch.zeros(n, c), torch.ones(n, c), torch.zeros(c), torch.ones(c))))
    return (s_args if series == "s" else b_args)(x, **{**good, **change})


IMPLEMENTATIONS = ["cpu", "generic", "triton", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("series, change, message, in_forward", [
    ("s", dict(w=torch.ones(6)), "weight must be (C,) = (8,) or (N, C) = (3, 8), got shape [6]", True),
    ("s", dict(v=torch.ones(3, 6)), "v1 must be (C,) = (8,), got shape [3, 6]", True),
    ("s", dict(v=torch.ones(3, 8)), "v1 must be (C,) = (8,), got shape [3, 8]", True),
    ("s", dict(b=torch.ones(3, 7)), "bias must be (C,) = (8,) or (N, C) = (3, 8), got shape [3, 7]", True),
    ("s", dict(groups=3), "groups=3 does not divide C=8", True),
    ("s", dict(groups=0), "groups=0 does not divide C=8", True),
    ("s", dict(stats=(torch.zeros(3, 2), torch.ones(3, 4))), "mean must have 12 elements, got shape [3, 2]", False),
    ("s", dict(stats=(torch.zeros(3, 4), torch.ones(4, 4))), "rstd must have 12 elements, got shape [4, 4]", False),
    ("s", dict(grad=torch.ones(3, 8, 5, 5)), "grad must have x's shape [3, 8, 5, 4], got [3, 8, 5, 5]", False),
    ("b", dict(w=torch.ones(2, 8)), "weight must be (C,) = (8,) or (N, C) = (3, 8), got shape [2, 8]", True),
    ("b", dict(b=torch.ones(7)), "bias must be (C,) = (8,) or (N, C) = (3, 8), got shape [7]", True),
    ("b", dict(v=torch.ones(2, 8)), "v1 must be (C,) = (8,), got shape [2, 8]", True),
    ("b", dict(v=torch.ones(3, 8)), "v1 must be (C,) = (8,), got shape [3, 8]", True),
    ("b", dict(grad=torch.ones(3, 8, 4, 5)), "grad must have x's shape [3, 8, 5, 4], got [3, 8, 4, 5]", False),
    ("b", dict(variant=3), "variant must be 0, 1 or 2, got 3", True),
    ("b", dict(variant=-1), "variant must be 0, 1 or 2, got -1", True),
    ("b", dict(stats=(torch.zeros(3, 8), torch.ones(3, 8), torch.zeros(8), torch.ones(7))),
     "batch_var must have 8 elements, got shape [7]", True),
    ("b", dict(stats=(torch.zeros(3, 8), torch.ones(24), torch.zeros(4), torch.ones(8))),
     "batch_mean must have 8 elements, got shape [4]", False),
    ("b", dict(stats=(torch.zeros(2, 8), torch.ones(3, 8), torch.zeros(8), torch.ones(8))),
     "mean must have 24 elements, got shape [2, 8]", False),
    ("b", dict(stats=(torch.zeros(3, 8), torch.ones(3, 7), torch.zeros(8), torch.ones(8))),
     "q must have 24 elements, got shape [3, 7]", False),
    ("affine", dict(w=torch.ones(6)), "weight must be (C,) = (8,) or (N, C) = (3, 8), got shape [6]", True),
    ("affine", dict(b=torch.ones(3, 7)), "bias must be (C,) = (8,) or (N, C) = (3, 8), got shape [3, 7]", True),
    ("affine", dict(grad=torch.ones(3, 8, 5, 5)), "grad must have x's shape [3, 8, 5, 4], got [3, 8, 5, 5]", False),
])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_operators_name_an_argument_of_the_wrong_size(request, implementation, series, change, message,
                                                          in_forward):
    """Each implementation of each operator (the C++ CPU kernels, the device-generic one, the Triton kernels,
    and what CUDA dispatches to) checks the sizes of the tensors it reads (a wrong one would read out of bounds
    and crash the process) and names the operator, the argument, its expected size and the one given, in the
    same words; forward and backward alike where both take it."""
    args = size_check_args(series, torch.randn(3, 8, 5, 4), **change)
    forward, backward, forward_args, backward_args = operator_pair(request, implementation, series, *args)
    with pytest.raises(RuntimeError, match=re.escape(f"evonorm::{series}_backward: {message}")):
        backward(*backward_args)
    if in_forward:
        with pytest.raises(RuntimeError, match=re.escape(f"evonorm::{series}_forward: {message}")):
            forward(*forward_args)


@pytest.mark.parametrize("x, message", [
    (torch.randn(3, 8, 20), "expected an NCHW tensor, got 3 dims"),
    (torch.ones(3, 8, 5, 4, dtype=torch.int64), "expected a floating-point tensor, got "),
    (torch.randn(3, 8, 0, 4), "expected a non-empty tensor, got shape [3, 8, 0, 4]"),
    (torch.randn(0, 8, 5, 4), "expected a non-empty tensor, got shape [0, 8, 5, 4]"),
])
@pytest.mark.parametrize("series", ["s", "b", "affine"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_operators_refuse_an_input_they_cannot_read(request, implementation, series, x, message):
    """An input that is not a non-empty 4-d floating-point tensor is refused by name by every implementation, in
    both directions (the dtype is then spelt as the implementation's language spells it). Empty planes crashed the
    C++ kernels (they read a run's first value); the layers return an empty input's output without the operators."""
    forward, backward, forward_args, backward_args = operator_pair(request, implementation, series,
                                                                   *size_check_args(series, x))
    for step, call, args in (("forward", forward, forward_args), ("backward", backward, backward_args)):
        with pytest.raises(RuntimeError, match=re.escape(f"evonorm::{series}_{step}: {message}")):
            call(*args)


@pytest.mark.parametrize("series, setting", [("s", dict(groups=1)), ("s", dict(groups=8)), ("b", dict(variant=0)),
                                             ("b", dict(variant=2)), ("affine", {})])
@pytest.mark.parametrize("per_sample", [False, True])
@pytest.mark.parametrize("implementation", ["cpu", "generic"])
def test_the_size_checks_pass_right_sized_arguments(request, implementation, series, setting, per_sample):
    """The checks refuse only what is wrong: per-channel and per-sample parameters of the right sizes run, with
    the extreme group counts (1 and C) and the first and last B variants."""
    w = torch.ones(3, 8) if per_sample else torch.ones(8)
    args = size_check_args(series, torch.randn(3, 8, 5, 4), w=w, b=torch.zeros_like(w), **setting)
    forward, backward, forward_args, backward_args = operator_pair(request, implementation, series, *args)
    y = forward(*forward_args)
    y = y if series == "affine" else y[0]
    dx = backward(*backward_args)[0]
    assert y.shape == dx.shape == (3, 8, 5, 4) and torch.isfinite(y).all() and torch.isfinite(dx).all()


def test_kernel_status_is_reported_once(cpp_kernels):
    assert cpp_kernels.source in ("installed", "jit") and str(cpp_kernels).startswith(cpp_kernels.source)
    assert ops.load() is True and ops.extension.status() is cpp_kernels


def test_without_cpp_kernels_the_generic_implementation_runs():
    """Without the C++ kernels (no compiler, or EVONORM_CPP=0): one warning, the same results, the eager layer
    through its Python autograd function (its C++ node is built with the kernels)."""
    code = (
        "import warnings, torch, evonorm_core\n"
        "from evonorm_core import ops, functional as EF\n"
        "x = torch.randn(2, 8, 5, 5, requires_grad=True)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    y = EF.evonorm_s(x, None, None, torch.ones(8), groups=4, eps=1e-5)\n"
        "    EF.evonorm_s(x, None, None, torch.ones(8), groups=4, eps=1e-5)\n"
        "y.sum().backward()\n"
        "ref = EF.evonorm_s(x, None, None, torch.ones(8), groups=4, eps=1e-5, impl='reference')\n"
        "print(ops.status().source, sum('EvoNorm CPU kernels' in str(m.message) for m in w),"
        " torch.allclose(y, ref, atol=1e-5), torch.ops.evonorm.s_forward.default.has_kernel_for_dispatch_key"
        "(torch._C.DispatchKey.CPU), y.grad_fn.name())\n"
    )
    env = {**os.environ, "EVONORM_CPP": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["unavailable", "1", "True", "False", eager_nodes.python_node("s_forward")]


def test_another_device_defines_the_operators_without_the_cpu_kernels():
    """A process whose first EvoNorm call is on another device (meta here, CUDA on a GPU machine)
    defines the operators and runs their PyTorch implementation, and never looks up, builds or warns
    about the C++ CPU kernels (found on a GPU: the first CUDA call warned that the CPU kernels were missing)."""
    code = (
        "import warnings, torch, evonorm_core\n"
        "from evonorm_core import ops\n"
        "def refuse(): raise AssertionError('the CPU kernels were looked up')\n"
        "ops.status = ops.extension.status = refuse\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('error')\n"
        "    for name in ('evonorm_s0', 'evonorm_b0'):\n"
        "        x = torch.randn(2, 8, 4, 4, device='meta', requires_grad=True)\n"
        "        y = evonorm_core.build_norm_act(name, 8).to('meta')(x)\n"
        "        y.sum().backward()\n"
        "print(y.device, x.grad.shape == x.shape, ops.is_loaded('meta'), ops.is_loaded('cpu'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["meta", "True", "True", "False"]


def make_pair(name, channels, groups=None, nonlinearity=True, dtype=torch.float64):
    """A fused layer with random parameters and running_var, and the reference ``p`` dict."""
    options = {"groups": groups} if "_s" in name else {}
    layer = evonorm_core.build_norm_act(name, channels, nonlinearity, **options).to(dtype)
    with torch.no_grad():
        for pname, param in layer.named_parameters():
            param.copy_(torch.randn(channels) * 0.6 + (1.0 if pname in ("weight", "v1") else 0.0))
        if getattr(layer, "running_var", None) is not None:
            layer.running_var.copy_(torch.rand(channels) + 0.5)
    p = {{"weight": "gamma", "bias": "beta"}.get(k, k): v.detach().double().clone()
         for k, v in [*layer.named_parameters(), *layer.named_buffers()]}
    return layer, p


def layer_expected(name, layer, p, x, training, nonlinearity=True):
    fn = ref.reference(name, nonlinearity)
    return fn(x.double(), p, layer.eps, training=training, groups=getattr(layer, "groups", None))


def test_fused_is_the_default_and_reference_stays_available():
    fused = evonorm_core.build_norm_act("evonorm_s0", 8)
    reference = evonorm_core.build_norm_act("EvoNorm-S0", 8, impl="reference")
    assert fused.impl == "fused" and reference.impl == "reference"
    assert "impl=reference" in repr(reference)
    with pytest.raises(ValueError, match=r"impl must be one of \['fused', 'reference'\], got 'triton'"):
        evonorm_core.build_norm_act("evonorm_b0", 8, impl="triton")


LAYER_MODES = [(name, True) for name in EVONORMS] + [(name, False) for name in B_SERIES]


@pytest.mark.parametrize("name,training", LAYER_MODES)
def test_layer_gradcheck_float64(name, training):
    layer, p = make_pair(name, 6, 3)
    layer.train(training)
    x = (torch.randn(3, 6, 5, 4, dtype=torch.float64) * 1.5 + 0.3).requires_grad_()
    torch.testing.assert_close(layer(x), layer_expected(name, layer, p, x, training), rtol=1e-10, atol=1e-10)
    if training and name in B_SERIES:  # each call updates running_var; gradcheck calls many times
        layer.momentum = 1e-12

    def f(x, *values):
        return torch.func.functional_call(layer, {n: v for (n, _), v in zip(layer.named_parameters(), values)}, (x,))

    assert torch.autograd.gradcheck(f, (x, *layer.parameters()), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("name,training", LAYER_MODES)
def test_gradgradcheck_float64(name, training):
    layer, _ = make_pair(name, 6, 3)
    layer.train(training)
    layer.momentum = 1e-12
    x = (torch.randn(2, 6, 3, 2, dtype=torch.float64) + 0.3).requires_grad_()

    def f(x, *values):
        return torch.func.functional_call(layer, {n: v for (n, _), v in zip(layer.named_parameters(), values)}, (x,))

    assert torch.autograd.gradgradcheck(f, (x, *layer.parameters()), fast_mode=True, atol=1e-5)


# the affine operator without gamma and beta is the identity, whose gradient is constant: nothing to differentiate twice
@pytest.mark.parametrize("name,training,given,affine", [
    (*mode, affine) for mode in CPU_MODES for affine in ("none", "channel", "sample") if (mode[0], affine) != ("affine", "none")])
def test_double_backward_matches_paper(cpp_kernels, name, training, given, affine):
    """``create_graph=True`` (gradient penalties, gradgradcheck) differentiates a composed formula instead of the
    kernels: its first gradients, and the gradients of a penalty on them, against the float64 paper formula,
    for every layer, mode and form of the affine."""
    def first_and_second(forward, x, w, b, v1, batch_var):
        leaves = [t for t in (x, w, b, v1, batch_var if given and name in B_SERIES else None) if t is not None]
        y = forward(x, w, b, v1, batch_var)
        first = torch.autograd.grad((y * y.detach().cos()).sum(), leaves, create_graph=True)
        penalty = sum(g.square().sum() for g in first)
        return [*first, *torch.autograd.grad(penalty, leaves, materialize_grads=True)]

    x, w, b, v1, batch_var, _ = make_inputs(name, (3, 8, 5, 4), torch.float64, torch.contiguous_format, affine)
    inputs = [None if t is None else t.requires_grad_() for t in (x, w, b, v1, batch_var)]
    got = first_and_second(lambda *t: operator_y(name, given, *t, 4), *inputs)
    want = first_and_second(lambda *t: paper(name, training, given, *t, 4), *inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


class BackwardMasks(TorchDispatchMode):
    """Records the ``output_mask`` of every ``s_backward`` / ``b_backward`` call."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.evonorm.s_backward.default, torch.ops.evonorm.b_backward.default):
            self.masks.append(list(args[-1]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("entry", ["operator", "eager"])
@pytest.mark.parametrize("name, wanted", [
    *(("evonorm_s0", wanted) for wanted in ("wbv", "", "w", "b", "v")),
    *(("evonorm_b0", wanted) for wanted in ("wbvr", "", "w", "b", "v", "r")),
])
def test_backward_computes_only_the_gradients_asked_for(cpp_kernels, name, wanted, entry):
    """The backward operator is asked (``output_mask``) for the gradients of exactly the parameters that require
    one, gamma, beta, v1 and a given variance (r) each on its own, and each is the one computed with all asked;
    through the operator's registered autograd and through the eager entry point (on the CPU its C++ node)."""
    x, w, b, v1, batch_var, grad = make_inputs(name, (3, 8, 5, 4), torch.float64, torch.contiguous_format, "channel")
    full = through_operator(name, True, name in B_SERIES, x, w, b, v1, batch_var, grad, 4)[1]
    params = [t.detach().clone().requires_grad_(key in wanted) for t, key in zip((w, b, v1, batch_var), "wbvr")]
    x = x.detach().clone().requires_grad_()
    with BackwardMasks() as recorded:
        operator_y(name, name in B_SERIES, x, *params, 4, entry).backward(grad)
    asked = [key in wanted for key in ("wbv" if name in S_OPTIONS else "wbvr")]
    assert recorded.masks == [asked]
    torch.testing.assert_close(x.grad, full[0], rtol=0, atol=0)
    for t, key, want in zip(params, "wbvr", full[1:]):
        assert (t.grad is None) == (key not in wanted or want is None)
        if t.grad is not None:
            torch.testing.assert_close(t.grad, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_double_backward_of_the_bias_alone(cpp_kernels, name):
    """``create_graph=True`` with only beta requiring a gradient (nothing for the composed formula to
    differentiate): beta's gradient is the upstream gradient summed per channel, and differentiable."""
    x, w, b, v1, batch_var, grad = make_inputs(name, (3, 8, 5, 4), torch.float64, torch.contiguous_format, "channel")
    b.requires_grad_()
    (db,) = torch.autograd.grad(operator_y(name, False, x, w, b, v1, batch_var, 4), b, grad, create_graph=True)
    torch.testing.assert_close(db, grad.sum((0, 2, 3)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_double_backward_of_a_bf16_input_is_the_float32_one_rounded(cpp_kernels, name):
    """With ``create_graph=True`` a bf16 input is differentiated through the float32 formula: its gradients are
    exactly those of the same values in float32, x's rounded to bf16 and the float32 parameters' as they are."""
    x, w, b, v1, batch_var, grad = make_inputs(name, (3, 8, 5, 4), torch.float32, torch.contiguous_format, "channel")
    x, grad = x.bfloat16(), grad.bfloat16()

    def first_gradients(x, grad):
        leaves = [x.clone().requires_grad_(), *(t.clone().requires_grad_() for t in (w, b, v1))]
        return torch.autograd.grad(operator_y(name, False, *leaves, batch_var, 4), leaves, grad, create_graph=True)

    got, want = first_gradients(x, grad), first_gradients(x.float(), grad.float())
    assert got[0].dtype == torch.bfloat16 and torch.equal(got[0], want[0].bfloat16())
    for g, w_ in zip(got[1:], want[1:], strict=True):
        assert torch.equal(g, w_)


class NoGradient(torch.autograd.Function):
    """Passes its input on and sends no gradient back (None)."""

    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        return None


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_an_output_that_gets_no_gradient_costs_no_backward(cpp_kernels, name):
    """When nothing flows back into ``y`` (its gradient is None: not materialized as zeros), the backward
    returns None for every input without running the backward operator."""
    x, w, b, v1, batch_var, _ = make_inputs(name, (3, 8, 5, 4), torch.float64, torch.contiguous_format, "channel")
    leaves = [t.requires_grad_() for t in (x, w, b, v1)]
    with BackwardMasks() as recorded:
        (NoGradient.apply(operator_y(name, False, *leaves, batch_var, 4)).sum() + x.sum()).backward()
    assert recorded.masks == [] and torch.equal(x.grad, torch.ones_like(x))  # x's gradient: the other term's only
    assert [t.grad for t in leaves[1:]] == [None, None, None]


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


@pytest.mark.parametrize("name", EVONORMS)
def test_nonlinearity_off_is_cheap_affine(name):
    layer, p = make_pair(name, 8, 4, nonlinearity=False)
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(layer(x), layer_expected(name, layer, p, x, True, nonlinearity=False))
    assert torch.autograd.gradcheck(layer, (x,), fast_mode=True)
    assert saved_bytes(layer, x) <= 1.1 * x.numel() * x.element_size()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s2", "evonorm_b0", "evonorm_b1"])
def test_half_inputs_use_float32_statistics(name, dtype):
    layer, p = make_pair(name, 8, 4, dtype=torch.float32)
    x = (torch.randn(2, 8, 16, 16) * 3 + 1).to(dtype).requires_grad_()
    y = layer(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), layer_expected(name, layer, p, x.detach(), True), rtol=2e-2, atol=2e-2)
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


@pytest.mark.parametrize("dtype,near_constant", [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True)],
                         ids=["float32", "bfloat16", "float32-near-constant"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", range(len(EF.B_VARIANTS)))
@pytest.mark.parametrize("implementation", ["cpu", "generic"])
def test_b_backward_takes_the_instance_mean_from_x_when_given_none(request, implementation, variant, layout, dtype,
                                                                  near_constant):
    """An empty ``mean`` (what autograd keeps on the CPU) gives the gradients of the forward's own mean; on
    near-constant planes (|mean| >> std) they are no further from the float64 ones than with the forward's float32
    mean, since the mean is summed from each plane's first value as the forward's moments are (a plain float32 sum
    of 149.0 + 1e-4 noise is off by about the noise)."""
    gen = torch.Generator().manual_seed(variant)
    x = torch.randn(3, 16, 5, 6, generator=gen) * (1e-4 if near_constant else 1.0) + (149.0 if near_constant else 0.3)
    x = x.to(dtype).contiguous(memory_format=LAYOUTS[layout])
    w, b, v = torch.rand(16, generator=gen) + 0.5, torch.randn(16, generator=gen), torch.rand(16, generator=gen) + 0.5
    grad = torch.randn(x.shape, generator=gen).to(dtype)
    forward, backward, _, _ = operator_pair(request, implementation, "b", (), ())
    _, with_mean = b_args(x, w, b, v, forward(x, w, b, v, None, variant, 1e-5)[1:], grad, variant)
    without_mean = list(with_mean)
    without_mean[5] = with_mean[5].new_empty(0)
    got, want = backward(*without_mean), backward(*with_mean)
    if near_constant:
        x64 = [a.double() if isinstance(a, torch.Tensor) else a for a in (x, w, b, v)]
        _, exact = b_args(*x64, library.generic_b_forward(*x64, None, variant, 1e-5)[1:], grad.double(), variant)
        dx = library.generic_b_backward(*exact)[0]
        assert (got[0] - dx).abs().max() <= 1.01 * (want[0] - dx).abs().max() + 1e-9
        return
    for g, wanted in zip(got, want):
        if wanted.numel():
            torch.testing.assert_close(g.float(), wanted.float(), rtol=1e-4, atol=1e-4 * wanted.float().abs().max().item())


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_autograd_on_the_cpu_keeps_no_b_instance_mean(cpp_kernels, layout):
    """Of the B series' per-(n, c) statistics, the NCHW backward on the CPU keeps q alone, the mean it takes from x;
    channels_last keeps both (summing x there costs more than the mean saves)."""
    x = torch.randn(4, 8, 5, 5).contiguous(memory_format=LAYOUTS[layout]).requires_grad_()
    per_sample = []

    def pack(t):
        per_sample.append(tuple(t.shape) == (4, 8))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = evonorm_core.build_norm_act("evonorm_b0", 8)(x)
    assert sum(per_sample) == (1 if layout == "nchw" else 2)
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_nan_input_propagates(cpp_kernels, name):
    x = torch.randn(2, 8, 4, 4)
    x[1, 3, 2, 2] = float("nan")
    y = evonorm_core.build_norm_act(name, 8, **({"groups": 4} if "_s" in name else {}))(x)
    assert torch.isnan(y[1, 3, 2, 2])
    other_groups = [0, 1, 4, 5, 6, 7]  # neither the channel (batch statistic) nor the group of the NaN
    assert torch.isfinite(y[:, other_groups]).all()


@pytest.mark.parametrize("shape,groups", [((2, 8, 4, 4), 4), ((4, 8, 9, 8), 4), ((4, 64, 7, 7), 2)],
                         ids=["one-vector-planes", "planes-across-vectors", "runs-of-7x7-planes"])
def test_nan_input_stays_in_its_group_through_s0_forward_and_backward(cpp_kernels, shape, groups):
    """A NaN makes its group's statistic NaN, so S0's output and x's gradient are NaN in that group of that sample
    and finite everywhere else, on each NCHW float32 path: planes of one vector, planes of 72 values that end inside
    vectors (the backward's run of planes as one array), 7x7 planes in runs longer than the small-plane backward's."""
    n, c = shape[:2]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    x[1, 3, 2, 2] = float("nan")
    x.requires_grad_()
    y = evonorm_core.build_norm_act("evonorm_s0", c, groups=groups)(x)
    y.backward(torch.randn(shape, generator=torch.Generator().manual_seed(1)))
    per_group = c // groups
    in_group = torch.zeros(shape, dtype=torch.bool)
    in_group[1, 3 // per_group * per_group:(3 // per_group + 1) * per_group] = True
    for result in (y.detach(), x.grad):
        assert torch.isnan(result[in_group]).all()
        assert torch.isfinite(result[~in_group]).all()


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


@pytest.mark.gpu
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("name", EVONORMS)
def test_cuda_operator_matches_reference(name, layout):
    """On CUDA the operators run their Triton kernels (the device-generic implementation without Triton)."""
    layer, p = make_pair(name, 32, 8, dtype=torch.float32)
    layer = layer.cuda()
    x = (torch.randn(4, 32, 9, 7, device="cuda") * 1.5 + 0.3).contiguous(memory_format=layout).requires_grad_()
    reference = evonorm_core.build_norm_act(name, 32, impl="reference", **({"groups": 8} if "_s" in name else {}))
    reference.load_state_dict(layer.state_dict())
    g = torch.randn_like(x)
    x64 = x.detach().double().requires_grad_()
    for got, want in zip(grads(layer, x, g), grads(reference.cuda().double(), x64, g.double())):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def grads(layer, x, g):
    y = layer(x)
    return (y, *torch.autograd.grad(y, (x, *layer.parameters()), g))


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
