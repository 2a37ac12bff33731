"""The operators' Triton kernels (evonorm_core.ops.triton_kernels, what CUDA runs) against
float64 paper formulas.

On a machine with CUDA they run on the GPU. Without one, ``test_kernels_under_the_triton_interpreter``
runs this file again in a subprocess under Triton's interpreter (``TRITON_INTERPRET=1``: the
same kernels executed on the CPU with NumPy), because Triton picks the interpreter when the
kernels are defined, i.e. at import. The interpreter checks the kernels' arithmetic and
indexing, not their compilation for a GPU.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import evonorm_core
from evonorm_core import functional as EF
from evonorm_core import ops
from evonorm_core.ops import library

from .test_fast_layers import (
    DTYPES,
    KERNEL_SHAPES,
    LAYOUTS,
    MODES,
    assert_matches,
    assert_nan_batch_variance_gradients,
    b_backward_args_with_a_nan_batch_variance,
    expected,
    make_inputs,
    through_functions,
)

triton_kernels = pytest.importorskip("evonorm_core.ops.triton_kernels", reason="Triton is not installed")

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
if torch.cuda.is_available():
    DEVICE = "cuda"
elif INTERPRETED:
    DEVICE = "cpu"
else:
    DEVICE = None
needs_device = pytest.mark.skipif(
    DEVICE is None, reason="no CUDA here: these run on the CPU in test_kernels_under_the_triton_interpreter's subprocess"
)
KERNEL_DTYPES = {d: tol for d, tol in DTYPES.items() if d != torch.float64}


def test_kernels_under_the_triton_interpreter():
    if DEVICE is not None:
        pytest.skip("this process runs the kernels itself")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", __file__]
    done = subprocess.run(cmd, env=env, cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_loading_for_cuda_registers_the_kernels_as_the_cuda_implementation():
    """Checked from the dispatcher, so it runs without a GPU: ``ops.load("cuda")`` (what the layers call
    for a CUDA input) makes every operator's CUDA kernel this module's."""
    ops.load("cuda")
    for name in ("s_forward", "s_backward", "b_forward", "b_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"evonorm::{name}", "CUDA"), name
    assert triton_kernels.register.cache_info().currsize == 1  # registered once, however often load() runs
    ops.load("cuda")
    assert triton_kernels.register.cache_info().currsize == 1


def on_device(args):
    return [None if t is None else t.to(DEVICE) for t in args]


def through_triton(*args):
    """The Triton kernels' forward and backward, called directly (as the CUDA dispatch does), results on the CPU."""
    k = triton_kernels
    y, grads = through_functions(k.s_forward, k.s_backward, k.b_forward, k.b_backward, *args)
    return y.cpu(), [None if t is None else t.cpu() for t in grads]


@needs_device
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", list(KERNEL_DTYPES), ids=str)
@pytest.mark.parametrize("name,training,given", MODES)
def test_triton_kernels_match_paper(name, training, given, dtype, layout):
    for i, (shape, groups) in enumerate(KERNEL_SHAPES):
        affine = ("channel", "sample", "none")[i % 3]
        args = make_inputs(name, shape, dtype, LAYOUTS[layout], affine, seed=i)
        want = expected(name, training, given, *args, groups)
        got = through_triton(name, training, given, *on_device(args), groups)
        assert_matches(*got, *want, KERNEL_DTYPES[dtype], LAYOUTS[layout])


@needs_device
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_nan_input_propagates(name):
    x = torch.randn(2, 8, 4, 4)
    x[1, 3, 2, 2] = float("nan")
    layer = evonorm_core.build_norm_act(name, 8, **({"groups": 4} if "_s" in name else {}))
    y = layer.to(DEVICE)(x.to(DEVICE)).cpu()
    assert torch.isnan(y[1, 3, 2, 2])
    assert torch.isfinite(y[:, [0, 1, 4, 5, 6, 7]]).all()  # neither the NaN's channel nor its group


@needs_device
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("variant", range(len(EF.B_VARIANTS)))
def test_b_backward_on_a_nan_batch_variance_matches_the_generic_implementation(variant, layout):
    """A NaN given batch variance: the kernels' gradients equal the generic implementation's, NaN in that channel's
    dx and, for B0, its dv1 (the gradient reaching max(sb, u) goes to both operands where one is NaN)."""
    args = b_backward_args_with_a_nan_batch_variance(variant, layout)
    on_dev = [t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in args]
    assert_nan_batch_variance_gradients(triton_kernels.b_backward(*on_dev), library.generic_b_backward(*args))


@needs_device
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_b_backward_takes_the_instance_mean_from_x_when_given_none(layout):
    """An empty ``mean`` (the operators' contract; autograd on CUDA passes the forward's) gives the gradients of the
    forward's own mean."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16, 5, 6, generator=gen).contiguous(memory_format=LAYOUTS[layout]).to(DEVICE)
    w, b, v = (torch.rand(16, generator=gen).to(DEVICE) + 0.5 for _ in range(3))
    grad = torch.randn(x.shape, generator=gen).to(DEVICE)
    _, mean, q, batch_mean, batch_var = triton_kernels.b_forward(x, w, b, v, None, 0, 1e-5)
    common = (w, b, v)
    with_mean = triton_kernels.b_backward(grad, x, *common, mean, q, batch_mean, batch_var, 0, 1e-5, True, [True] * 4)
    without = triton_kernels.b_backward(grad, x, *common, mean.new_empty(0), q, batch_mean, batch_var, 0, 1e-5, True,
                                        [True] * 4)
    for got, want in zip(without, with_mean):
        if want.numel():  # dbatch_var is empty: the batch statistics are x's own
            torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-5 * want.abs().max().item())


@needs_device
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s2", "evonorm_b0", "evonorm_b1"])
def test_near_constant_planes_keep_exact_statistics(name, channels_last):
    """|mean| >> std: the kernels take moments about a shift, so the variance survives float32."""
    options = {"groups": 8} if name.startswith("evonorm_s") else {}
    fused = evonorm_core.build_norm_act(name, 32, **options).to(DEVICE)
    exact = evonorm_core.build_norm_act(name, 32, impl="reference", **options).double()
    x = 149.0 + 1e-4 * torch.randn(4, 32, 7, 7, generator=torch.Generator().manual_seed(0))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    yf, yd = fused(x.to(DEVICE)).cpu(), exact(x.double())
    torch.testing.assert_close(yf.double(), yd, rtol=1e-5, atol=1e-5 * yd.abs().max().item())


@needs_device
def test_layers_reach_the_triton_kernels_through_the_cuda_dispatch():
    """A layer on CUDA runs ``torch.ops.evonorm`` whose CUDA implementation is these kernels
    (float64 goes to the device-generic implementation); checked against the reference layer."""
    if DEVICE != "cuda":
        pytest.skip("the CUDA dispatch needs CUDA tensors")
    for name in ("evonorm_s0", "evonorm_b0"):
        options = {"groups": 8} if name.startswith("evonorm_s") else {}
        fused = evonorm_core.build_norm_act(name, 32, **options).cuda()
        exact = evonorm_core.build_norm_act(name, 32, impl="reference", **options).cuda()
        x = torch.randn(4, 32, 9, 7, device="cuda", requires_grad=True)
        for dtype in (torch.float32, torch.float64):
            xd = x.detach().to(dtype).requires_grad_()
            torch.testing.assert_close(fused.to(dtype)(xd), exact.to(dtype)(xd), rtol=1e-4, atol=1e-4)
