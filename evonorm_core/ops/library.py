r"""The ``evonorm`` PyTorch operators: schemas, fake tensors, autograd and a device-generic
implementation.

Six operators, one call per direction of a layer (``torch.ops.evonorm.*``):

* ``s_forward(x, weight?, bias?, v1?, groups, eps, centered) -> (y, mean, rstd)``:
  ``y = x sigmoid(v x) r gamma + beta`` with ``r = (m2 + eps)^-1/2`` per (sample, group), ``m2``
  the group variance (``centered``; S0, S1) or mean square (S2); ``v = v1`` or 1; ``mean``,
  ``rstd`` are (N, G).
* ``s_backward(grad, x, weight?, bias?, v1?, mean, rstd, groups, centered, output_mask)
  -> (dx, dweight, dbias, dv1)``.
* ``b_forward(x, weight?, bias?, v1?, batch_var?, variant, eps) -> (y, mean, q, batch_mean, batch_var)``:
  ``y = x / max(sb, p x + q) gamma + beta`` with ``sb = sqrt(batch_var + eps)`` per channel
  and per (n, c) B0 (``variant=0``): ``p = v1``, ``q = sqrt(s2_wh + eps)``; B1: ``p = q =
  sqrt(mu_wh(x^2) + eps)``; B2: ``p = -1``, same ``q``. ``batch_var`` given: used as is
  (the moving average in eval, the all-reduced variance in synchronized training); absent:
  the batch's own variance, returned with the batch mean (else those two are empty).
* ``b_backward(grad, x, weight?, bias?, v1?, mean, q, batch_mean, batch_var, variant, eps,
  batch_from_x, output_mask) -> (dx, dweight, dbias, dv1, dbatch_var)``; ``mean`` the forward's,
  or empty: taken from ``x`` (what autograd passes for NCHW inputs on the CPU, whose kernel sums
  x in the pass that reads it anyway).
* ``affine_forward(x, weight?, bias?) -> y`` and ``affine_backward(grad, x, weight?, bias?, output_mask)
  -> (dx, dweight, dbias)``: ``y = x gamma + beta``, an EvoNorm without its nonlinearity; ``dx = g gamma``,
  ``dgamma = sum_hw g x``, ``dbeta = sum_hw g``, all three in one pass over ``(grad, x)`` on the CPU.

``weight``/``bias``: absent, per channel (C,) or per sample (N, C); ``v1``: absent or per
channel (C,) (the layers' own parameter). Gradients have their parameter's shape. Statistics
are float32 (float64 for float64 inputs); ``y`` and ``dx`` have the input's dtype and memory
layout (channels_last stays channels_last); ``grad`` may have either layout (the CPU kernels
read an NCHW gradient of a channels_last input in transposed tiles, without copying it).
Gradients that are not asked for (``output_mask``) come back as empty tensors.

The backward keeps only the input and these small statistics; it recomputes the gate and
the denominator. Derivation (``M`` = elements a statistic is taken over, ``s = sigmoid(v x)``):

S series, ``y = x s r gamma + beta``::

    dgamma = sum_hw g x s r     dbeta = sum_hw g      dv = sum_{n,hw} g x^2 s (1 - s) r gamma
    dr = sum_{group, hw} g x s gamma ;  k = -dr r^3 / M
    dx = g r gamma (s + v x s (1 - s)) + k (x - mu)      (mu = group mean; 0 for S2)

B series, ``y = x / d gamma + beta``, ``d = max(sb, u)``, ``u = p x + q``; with ``dd = -g gamma x / d^2``::

    U = sum_hw dd [to u]   UX = sum_hw dd x [to u]   B = sum_hw dd [to sb]
    dgamma = sum_hw g x / d   dbeta = sum_hw g   dv1 = sum_n UX (B0)   dsb = sum_{n} B
    dx = g gamma / d + [to u] dd p + k (x - mu_i) + k_b (x - mu_b)

with ``k = U' / (q HW)`` (``U' = U + UX`` for B1, where ``p = q``; ``mu_i`` the instance
mean for B0, 0 for B1/B2); ``k_b = dsb / (sb N HW)`` when the batch statistics are the
input's own, and ``d batch_var = dsb / (2 sb)`` when they were given. ``dd`` goes, as in
``torch.maximum``'s backward, to the larger of ``sb`` and ``u`` (``[to u]`` is ``u > sb``,
``[to sb]`` is ``u <= sb``), and to both where either is NaN.

Eager layers enter through :func:`s_forward_eager` / :func:`b_forward_eager` / :func:`affine_forward_eager`: the
same operators under the same autograd, without the per-call cost of ``torch.library``'s generated autograd wrapper,
on the CPU recorded as C++ autograd nodes (``csrc/eager_autograd.cpp``: no Python between the two directions'
operators), elsewhere as Python autograd functions; program capture calls the operators.

Kernels: C++ for the CPU (``csrc/evonorm_ops.cpp``, with the eager autograd nodes, loaded by :mod:`.extension`); Triton for
CUDA (:mod:`.triton_kernels`, registered by :func:`evonorm_core.ops.load`; float32, float16 and
bfloat16; the S and B operators: on CUDA the layers run their affine as ``F.batch_norm``, see
:func:`evonorm_core.functional.affine`); this module's PyTorch implementation for everything else (float64 on CUDA, other
devices, CUDA without Triton) and for the CPU when the C++ kernels could not be built. Double
backward (``create_graph=True``) differentiates the composed formula of
:mod:`evonorm_core.formulas` from the saved input.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from ..formulas import B_VARIANTS, apply_affine, b_transform, compute_dtype, s_transform, to_nchw, upcast
from . import checks

NAMESPACE = "evonorm"
# b_forward's and b_backward's `int variant` is the index of the variant's name in B_VARIANTS
SCHEMAS = [
    "s_forward(Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, int groups, float eps, bool centered)"
    " -> (Tensor, Tensor, Tensor)",
    "s_backward(Tensor grad, Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, Tensor mean, Tensor rstd,"
    " int groups, bool centered, bool[3] output_mask) -> (Tensor, Tensor, Tensor, Tensor)",
    "b_forward(Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, Tensor? batch_var, int variant, float eps)"
    " -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "b_backward(Tensor grad, Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, Tensor mean, Tensor q,"
    " Tensor batch_mean, Tensor batch_var, int variant, float eps, bool batch_from_x, bool[4] output_mask)"
    " -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "affine_forward(Tensor x, Tensor? weight, Tensor? bias) -> Tensor",
    "affine_backward(Tensor grad, Tensor x, Tensor? weight, Tensor? bias, bool[2] output_mask)"
    " -> (Tensor, Tensor, Tensor)",
]


# ---- shapes, dtypes and layouts shared by the fake and the real implementations -----------

def memory_format(x: Tensor) -> torch.memory_format:
    """The layout of ``y`` and ``dx``: channels_last for a channels_last-only input, else NCHW."""
    if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def like_x(x: Tensor) -> Tensor:
    """An uninitialised ``y``/``dx`` for ``x``: its shape, dtype and :func:`memory_format`."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=memory_format(x))


def unrequested(x: Tensor) -> Tensor:
    """What an operator returns for a gradient that ``output_mask`` did not ask for."""
    return torch.empty(0, dtype=torch.float32, device=x.device)


def _grad_like(t: Tensor | None, wanted: bool, x: Tensor) -> Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format) if wanted and t is not None else unrequested(x)


def fake_s_forward(x, weight, bias, v1, groups, eps, centered):
    stat = x.new_empty((x.shape[0], groups), dtype=compute_dtype(x))
    return like_x(x), stat, torch.empty_like(stat)


def fake_s_backward(grad, x, weight, bias, v1, mean, rstd, groups, centered, output_mask):
    return (like_x(x), _grad_like(weight, output_mask[0], x), _grad_like(bias, output_mask[1], x),
            _grad_like(v1, output_mask[2], x))


def fake_b_forward(x, weight, bias, v1, batch_var, variant, eps):
    acc = compute_dtype(x)
    n, c = x.shape[:2]
    batch = (0,) if batch_var is not None else (c,)
    return (like_x(x), x.new_empty((n, c), dtype=acc), x.new_empty((n, c), dtype=acc),
            x.new_empty(batch, dtype=acc), x.new_empty(batch, dtype=acc))


def fake_b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var, variant, eps, batch_from_x, output_mask):
    return (like_x(x), _grad_like(weight, output_mask[0], x), _grad_like(bias, output_mask[1], x),
            _grad_like(v1, output_mask[2] and variant == 0, x),
            _grad_like(batch_var, output_mask[3] and not batch_from_x, x))


def fake_affine_forward(x, weight, bias):
    return like_x(x)


def fake_affine_backward(grad, x, weight, bias, output_mask):
    return like_x(x), _grad_like(weight, output_mask[0], x), _grad_like(bias, output_mask[1], x)


# ---- the device-generic implementation (PyTorch ops; what no kernel covers) ---------------

def _mul(a: Tensor, b: Tensor | None) -> Tensor:
    return a if b is None else a * b


def _add(a: Tensor, b: Tensor | None) -> Tensor:
    return a if b is None else a + b


def reduce_like(per_nc: Tensor, like: Tensor | None, wanted: bool, x: Tensor) -> Tensor:
    """A parameter gradient from its per-(n, c) sums: summed over n for a (C,) parameter."""
    if not wanted or like is None:
        return unrequested(x)
    return (per_nc if like.dim() == 2 else per_nc.sum(0)).to(like.dtype)


def _out(t: Tensor, x: Tensor) -> Tensor:
    return t.to(x.dtype).contiguous(memory_format=memory_format(x))


def generic_s_forward(x, weight, bias, v1, groups, eps, centered):
    checks.s_forward(x, weight, bias, v1, groups, eps, centered)
    acc = compute_dtype(x)
    xa = x.to(acc)
    n, c = x.shape[:2]
    var, mean = torch.var_mean(xa.reshape(n, groups, -1), dim=2, unbiased=False)
    rstd = torch.rsqrt((var if centered else var + mean.square()) + eps)
    r = rstd.repeat_interleave(c // groups, dim=1)[:, :, None, None]
    gate = torch.sigmoid(_mul(xa, to_nchw(v1, acc)))
    y = _add(xa * gate * _mul(r, to_nchw(weight, acc)), to_nchw(bias, acc))
    return _out(y, x), mean, rstd


def generic_s_backward(grad, x, weight, bias, v1, mean, rstd, groups, centered, output_mask):
    checks.s_backward(grad, x, weight, bias, v1, mean, rstd, groups, centered, output_mask)
    acc = compute_dtype(x)
    xa, g = x.to(acc), grad.to(acc)
    n, c, h, w = x.shape
    cg = c // groups
    vx = _mul(xa, to_nchw(v1, acc))
    s = torch.sigmoid(vx)
    gxs = g * xa * s
    p_sum = gxs.sum((2, 3))
    w_nc = torch.ones(1, c, dtype=acc, device=x.device) if weight is None else weight.to(acc)
    dr = (p_sum * w_nc).view(n, groups, cg).sum(2)
    k = -dr * rstd.pow(3) / (cg * h * w)
    k0 = -k * mean if centered else torch.zeros_like(k)
    r_c = rstd.repeat_interleave(cg, dim=1)
    a = (w_nc * r_c)[:, :, None, None]
    dgate = s * (1 + vx * (1 - s))
    dx = g * a * dgate + k.repeat_interleave(cg, 1)[:, :, None, None] * xa + k0.repeat_interleave(cg, 1)[:, :, None, None]
    dv = unrequested(x)
    if output_mask[2] and v1 is not None:
        dv = ((gxs * xa * (1 - s)).sum((2, 3)) * a[:, :, 0, 0]).sum(0).to(v1.dtype)
    return (_out(dx, x), reduce_like(p_sum * r_c, weight, output_mask[0], x),
            reduce_like(g.sum((2, 3)), bias, output_mask[1], x), dv)


def _b_coefficients(xa, v1, mean, var_or_q, variant, eps, from_moments: bool):
    """Per-(n, c) ``(p, q)`` of the instance term ``u = p x + q`` as (N, C, 1, 1)."""
    q = torch.sqrt((var_or_q if variant == 0 else var_or_q + mean.square()) + eps) if from_moments else var_or_q
    if variant == 0:
        p = v1.to(xa.dtype).view(1, -1).expand_as(q)
    else:
        p = q if variant == 1 else torch.full_like(q, -1.0)
    return p[:, :, None, None], q


def generic_b_forward(x, weight, bias, v1, batch_var, variant, eps):
    checks.b_forward(x, weight, bias, v1, batch_var, variant, eps)
    acc = compute_dtype(x)
    xa = x.to(acc)
    var, mean = torch.var_mean(xa, dim=(2, 3), unbiased=False)
    if batch_var is None:
        b_mean = mean.mean(0)
        b_var = var.mean(0) + (mean - b_mean).square().mean(0)
        used, out_mean, out_var = b_var, b_mean, b_var.clone()
    else:
        used, out_mean, out_var = batch_var.to(acc), xa.new_empty(0), xa.new_empty(0)
    p, q = _b_coefficients(xa, v1, mean, var, variant, eps, True)
    sb = torch.sqrt(used + eps).view(1, -1, 1, 1)
    d = torch.maximum(sb, p * xa + q[:, :, None, None])
    y = _add(xa / d * (1 if weight is None else to_nchw(weight, acc)), to_nchw(bias, acc))
    return _out(y, x), mean, q, out_mean, out_var


def instance_mean(x: Tensor) -> Tensor:
    """Per-(n, c) mean of ``x`` in its own dtype, summed from each plane's first value so that
    near-constant planes (|mean| >> std) keep it exact, as the forward's moments do."""
    first = x[:, :, :1, :1]
    return (first + (x - first).mean((2, 3), keepdim=True)).flatten(1)


def generic_b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var, variant, eps, batch_from_x, output_mask):
    checks.b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var, variant, eps, batch_from_x, output_mask)
    acc = compute_dtype(x)
    xa, g = x.to(acc), grad.to(acc)
    n, c, h, w = x.shape
    mean = instance_mean(xa) if mean.numel() == 0 else mean.to(acc)
    p, q = _b_coefficients(xa, v1, mean, q.to(acc), variant, eps, False)
    sb_c = torch.sqrt(batch_var.to(acc) + eps)
    sb = sb_c.view(1, -1, 1, 1)
    u = p * xa + q[:, :, None, None]
    # which of max(sb, u) the gradient reaching d goes to, as in torch.maximum's backward: the larger, sb at a
    # tie, both where either is NaN
    to_u, to_sb = ~(sb >= u), ~(u > sb)
    d = torch.maximum(sb, u)
    gamma = 1 if weight is None else to_nchw(weight, acc)
    gd = g * gamma / d
    dd = -gd * xa / d
    dd_u = torch.where(to_u, dd, 0)
    u_sum, ux_sum, b_sum = dd_u.sum((2, 3)), (dd_u * xa).sum((2, 3)), torch.where(to_sb, dd, 0).sum((2, 3))
    k = (u_sum + ux_sum if variant == 1 else u_sum) / (q * (h * w))
    k0 = -k * mean if variant == 0 else torch.zeros_like(k)
    dsb = b_sum.sum(0)
    if batch_from_x:
        k_b = dsb / (sb_c * (n * h * w))
        k, k0 = k + k_b, k0 - k_b * batch_mean.to(acc)
    dx = gd - torch.where(to_u, gd * xa / d * p, 0) + k[:, :, None, None] * xa + k0[:, :, None, None]
    dv = unrequested(x)
    if output_mask[2] and variant == 0 and v1 is not None:
        dv = ux_sum.sum(0).to(v1.dtype)
    dvar = unrequested(x)
    if output_mask[3] and not batch_from_x:
        dvar = (dsb / (2 * sb_c)).to(batch_var.dtype)
    return (_out(dx, x), reduce_like((g * xa / d).sum((2, 3)), weight, output_mask[0], x),
            reduce_like(g.sum((2, 3)), bias, output_mask[1], x), dv, dvar)


def generic_affine_forward(x, weight, bias):
    checks.affine_forward(x, weight, bias)
    return _out(apply_affine(x.to(compute_dtype(x)), weight, bias), x)


def generic_affine_backward(grad, x, weight, bias, output_mask):
    checks.affine_backward(grad, x, weight, bias, output_mask)
    acc = compute_dtype(x)
    g = grad.to(acc)
    return (_out(_mul(g, to_nchw(weight, acc)), x), reduce_like((g * x.to(acc)).sum((2, 3)), weight, output_mask[0], x),
            reduce_like(g.sum((2, 3)), bias, output_mask[1], x))


# ---- autograd -----------------------------------------------------------------------------

def _s_setup_context(ctx, inputs, output):
    x, weight, bias, v1, groups, eps, centered = inputs
    ctx.save_for_backward(x, weight, bias, v1, output[1], output[2])
    ctx.mark_non_differentiable(*output[1:])  # statistics: no zero gradients made for them
    ctx.set_materialize_grads(False)
    ctx.groups, ctx.eps, ctx.centered = groups, eps, centered


def _double_backward(formula, grad: Tensor, inputs: tuple, bias: Tensor | None, need_bias: bool) -> list:
    """Gradients of ``formula(*inputs)`` (the layer without its bias) with ``create_graph=True``,
    and of the bias (``grad`` summed to its shape)."""
    wanted = [t for t in inputs if t is not None and t.requires_grad]
    with torch.enable_grad():
        y = formula(*inputs)
        found = iter(torch.autograd.grad(y, wanted, grad.to(y.dtype), create_graph=True) if wanted else ())
    grads = [next(found).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]
    dbias = None
    if need_bias and bias is not None:
        g = upcast(grad)  # summed in the compute dtype, as the kernels do: a bf16 sum over N H W loses digits
        dbias = (g.sum((2, 3)) if bias.dim() == 2 else g.sum((0, 2, 3))).to(bias.dtype)
    return grads, dbias


def _s_backward(ctx, grad, _grad_mean, _grad_rstd):
    if grad is None:  # y got no gradient (grads are not materialized)
        return (None,) * 7
    x, weight, bias, v1, mean, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    if torch.is_grad_enabled():  # create_graph=True: differentiate the composed formula
        def formula(x, weight, v1):
            return apply_affine(s_transform(upcast(x), v1, ctx.groups, ctx.eps, ctx.centered), weight, None)

        (dx, dw, dv), db = _double_backward(formula, grad, (x, weight, v1), bias, need[2])
        return dx, dw, db, dv, None, None, None
    mask = [need[1] and weight is not None, need[2] and bias is not None, need[3] and v1 is not None]
    dx, dw, db, dv = torch.ops.evonorm.s_backward(grad, x, weight, bias, v1, mean, rstd, ctx.groups, ctx.centered, mask)
    return dx, dw if mask[0] else None, db if mask[1] else None, dv if mask[2] else None, None, None, None


def _b_setup_context(ctx, inputs, output):
    x, weight, bias, v1, batch_var, variant, eps = inputs
    _, mean, q, batch_mean, own_var = output
    if x.device.type == "cpu" and memory_format(x) == torch.contiguous_format:
        # the NCHW backward takes the instance mean from x in its first pass, for one add per element: (N, C) floats
        # less kept; channels_last keeps it (there the sum is two more streams per row, 10-25 % of the backward)
        mean = mean.new_empty(0)
    from_x = batch_var is None
    ctx.save_for_backward(x, weight, bias, v1, mean, q, batch_mean, own_var if from_x else batch_var)
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.variant, ctx.eps, ctx.from_x = variant, eps, from_x


def _b_backward(ctx, grad, *_unused):
    if grad is None:  # y got no gradient (grads are not materialized)
        return (None,) * 7
    x, weight, bias, v1, mean, q, batch_mean, batch_var = ctx.saved_tensors
    need = ctx.needs_input_grad
    if torch.is_grad_enabled():  # create_graph=True: differentiate the composed formula
        def formula(x, weight, v1, given_var):
            xa = upcast(x)
            var = torch.var(xa, dim=(0, 2, 3), unbiased=False) if given_var is None else given_var
            return apply_affine(b_transform(xa, v1, var, B_VARIANTS[ctx.variant], ctx.eps), weight, None)

        given = None if ctx.from_x else batch_var
        (dx, dw, dv, dvar), db = _double_backward(formula, grad, (x, weight, v1, given), bias, need[2])
        return dx, dw, db, dv, dvar, None, None
    mask = [need[1] and weight is not None, need[2] and bias is not None,
            need[3] and v1 is not None and ctx.variant == 0, need[4] and not ctx.from_x]
    dx, dw, db, dv, dvar = torch.ops.evonorm.b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var,
                                                        ctx.variant, ctx.eps, ctx.from_x, mask)
    return (dx, dw if mask[0] else None, db if mask[1] else None, dv if mask[2] else None,
            dvar if mask[3] else None, None, None)


def _affine_setup_context(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.set_materialize_grads(False)


def _affine_backward(ctx, grad):
    if grad is None:  # y got no gradient (grads are not materialized)
        return None, None, None
    x, weight, bias = ctx.saved_tensors
    need = ctx.needs_input_grad
    if torch.is_grad_enabled():  # create_graph=True: differentiate the composed formula
        (dx, dw), db = _double_backward(lambda x, weight: apply_affine(upcast(x), weight, None), grad, (x, weight),
                                        bias, need[2])
        return dx, dw, db
    mask = [need[1] and weight is not None, need[2] and bias is not None]
    dx, dw, db = torch.ops.evonorm.affine_backward(grad, x, weight, bias, mask)
    return dx, dw if mask[0] else None, db if mask[1] else None


# ---- the eager entry points -----------------------------------------------------------------

# each differentiable operator's (setup_context, backward): registered with it, and its eager entry point's
AUTOGRAD = {"s_forward": (_s_setup_context, _s_backward), "b_forward": (_b_setup_context, _b_backward),
            "affine_forward": (_affine_setup_context, _affine_backward)}


def _below_autograd(name: str) -> Callable[..., tuple[Tensor, ...]]:
    """``torch.ops.evonorm.<name>`` called past its autograd kernel, straight to the device's kernel.

    The autograd kernel ``torch.library`` registers is Python, and with gradients off (inside an
    autograd function's forward, under ``torch.no_grad``) all it does is step past itself: about
    10 us a call, as much as the C++ kernels take for a batch-2 layer at a small plane."""
    def call(*inputs):
        with torch._C._AutoDispatchBelowAutograd():
            return getattr(torch.ops.evonorm, name)(*inputs)  # looked up per call: define() may come later

    return call


def _eager_autograd(name: str) -> type[torch.autograd.Function]:
    """``torch.ops.evonorm.<name>`` under the registered autograd (same ``setup_context`` and
    backward), without the per-call argument handling of ``torch.library``'s generated
    wrapper, which costs a B0 layer at a ResNet-50 7x7 stage about as much as its kernels.
    Eager only: program capture (compile, export, tracing) calls the operators themselves,
    whose registered autograd is what it records."""
    setup_context, backward = AUTOGRAD[name]
    op = _below_autograd(name)

    def forward(ctx, *inputs):  # forward(ctx, ...): Function.apply binds no signature per call
        output = op(*inputs)
        setup_context(ctx, inputs, output)
        return output

    members = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(f"{name}_eager", (torch.autograd.Function,), members)


_cpp_nodes: dict[str, Callable[..., tuple[Tensor, ...]]] = {}


def _cpp_node(name: str) -> Callable[..., tuple[Tensor, ...]] | None:
    """``torch.ops.evonorm.<name>_autograd`` (``csrc/eager_autograd.cpp``: the operator under the same autograd,
    recorded as a C++ node) once the C++ kernels, which define it, are loaded; else None."""
    op = _cpp_nodes.get(name)
    if op is None:
        try:
            op = _cpp_nodes[name] = getattr(torch.ops.evonorm, f"{name}_autograd").default
        except AttributeError:
            return None
    return op


# each differentiable operator under its registered autograd as a Python autograd function: the eager entry
# where its C++ node is not (CUDA, no C++ kernels)
PYTHON_AUTOGRAD = {name: _eager_autograd(name).apply for name in AUTOGRAD}


def _with_grad(name: str) -> Callable[..., tuple[Tensor, ...]]:
    """The eager entry point of ``torch.ops.evonorm.<name>`` with gradients: on the CPU its C++ autograd node, where
    the Python autograd function and its backward cost a cache-resident layer about as much as its kernels
    (docs/benchmarks.md, "The eager layers' autograd nodes in C++"); elsewhere :data:`PYTHON_AUTOGRAD`'s function.
    Both record the same backward."""
    python = PYTHON_AUTOGRAD[name]

    def call(*inputs):
        op = _cpp_node(name) if inputs[0].device.type == "cpu" else None
        return python(*inputs) if op is None else op(*inputs)

    call.__name__ = call.__qualname__ = f"{name}_eager"
    return call


# the eager entry points: with gradients and without
s_forward_eager = _with_grad("s_forward")
b_forward_eager = _with_grad("b_forward")
affine_forward_eager = _with_grad("affine_forward")
s_forward_no_grad = _below_autograd("s_forward")
b_forward_no_grad = _below_autograd("b_forward")
affine_forward_no_grad = _below_autograd("affine_forward")


@functools.lru_cache(maxsize=None)
def define() -> torch.library.Library:
    """Define the operators (once per process) with their fake, generic and autograd parts."""
    lib = torch.library.Library(NAMESPACE, "DEF")
    for schema in SCHEMAS:
        # flexible_layout: the kernels take NCHW and channels_last alike, so Inductor hands over its buffers
        # as they are (channels_last around its convolutions) instead of restriding them to the traced
        # layout and back (docs/benchmarks.md, "Inductor restrides around the operators")
        lib.define(schema, tags=(torch.Tag.flexible_layout,))
    for name, fake, generic in [
        ("s_forward", fake_s_forward, generic_s_forward),
        ("s_backward", fake_s_backward, generic_s_backward),
        ("b_forward", fake_b_forward, generic_b_forward),
        ("b_backward", fake_b_backward, generic_b_backward),
        ("affine_forward", fake_affine_forward, generic_affine_forward),
        ("affine_backward", fake_affine_backward, generic_affine_backward),
    ]:
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
        lib.impl(name, generic, "CompositeExplicitAutograd")
    for name, (setup_context, backward) in AUTOGRAD.items():
        torch.library.register_autograd(f"{NAMESPACE}::{name}", backward, setup_context=setup_context, lib=lib)
    return lib
