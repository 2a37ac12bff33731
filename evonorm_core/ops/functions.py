"""Fused EvoNorm forward and hand-derived backward as ``torch.autograd.Function``s.

For backward they keep only the input and per-(n, c) / per-group / per-channel
statistics; the elementwise intermediates (the gate ``sigmoid(v x)``, the denominator
``max(...)``) are recomputed from the input in two passes: one reducing the per-(n, c)
sums the small gradients need, one writing ``dx``. Statistics are float32 (float64 for
float64 inputs; the C kernels accumulate in float64) and the output has the input's dtype.

Derivation (``M`` = elements a statistic is taken over, ``s = sigmoid(v x)``):

S series, ``y = x s r gamma + beta`` with ``r = (m2 + eps)^-1/2`` per (sample, group) and
``m2`` the group variance (S0, S1) or mean square (S2)::

    dgamma = sum_{n,hw} g x s r     dbeta = sum g      dv = sum g x^2 s (1 - s) r gamma
    dr = sum_{group, hw} g x s gamma ;  k = -dr r^3 / M
    dx = g r gamma (s + v x s (1 - s)) + k (x - mu)      (mu = group mean; 0 for S2)

B series, ``y = x / d gamma + beta`` with ``d = max(sb, u)``, ``u = p x + q``; ``sb`` is the
batch (train) or moving (eval) standard deviation, and per (n, c): B0 ``p = v``,
``q = sqrt(s2_wh + eps)``; B1 ``p = q = sqrt(mu_wh(x^2) + eps)``; B2 ``p = -1``,
``q = sqrt(mu_wh(x^2) + eps)``. With ``dd = -g gamma x / d^2``::

    dq = sum_{hw, u > sb} dd    dp = sum_{hw, u > sb} dd x    dsb = sum_{n, hw, u <= sb} dd
    dx = g gamma / d + [u > sb] dd p + k_i (x - mu_i) + k_b (x - mu_b)

where ``k_i = dq' / (q HW)`` (``dq'`` = dq, or dq + dp for B1 where ``p = q``; ``mu_i`` the
instance mean for B0, 0 for B1/B2) and, in training, ``k_b = dsb / (sb N HW)``.

Double backward: with ``create_graph=True`` the backward recomputes the layer from the
saved input with composed (differentiable) PyTorch ops and differentiates that, so
gradient penalties work at the reference implementation's speed and memory.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd import Function


B_VARIANTS = ("b0", "b1", "b2")


def _differentiable_grads(formula, grad: Tensor, inputs: tuple[Tensor | None, ...]) -> list[Tensor | None]:
    """Gradients of ``formula(*inputs)`` (the layer without its bias) with ``create_graph=True``."""
    wanted = [t for t in inputs if t is not None and t.requires_grad]
    with torch.enable_grad():
        y = formula(*inputs)
        found = iter(torch.autograd.grad(y, wanted, grad.to(y.dtype), create_graph=True))
    return [next(found).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]


def _s_formula(x: Tensor, weight: Tensor, v1: Tensor | None, groups: int, eps: float, centered: bool) -> Tensor:
    """The layer without its bias, composed (twice differentiable), for double backward."""
    from ..functional import s_transform

    x = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    return s_transform(x, v1, groups, eps, centered) * weight.view(1, -1, 1, 1)


def _b_formula(x: Tensor, weight: Tensor, v1: Tensor | None, batch_var: Tensor | None, variant: str, eps: float) -> Tensor:
    """The layer without its bias, composed, for double backward; ``batch_var=None`` means
    training: the batch variance of ``x``."""
    from ..functional import b_transform

    x = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    if batch_var is None:
        batch_var = torch.var(x, dim=(0, 2, 3), unbiased=False)
    return b_transform(x, v1, batch_var, variant, eps) * weight.view(1, -1, 1, 1)


def _per_channel(t: Tensor, num_channels: int) -> Tensor:
    """(N, G) per-group values repeated for each of a group's channels: (N, C)."""
    n, groups = t.shape
    return t[:, :, None].expand(n, groups, num_channels // groups).reshape(n, num_channels)


def combine_group_moments(mean_nc: Tensor, var_nc: Tensor, groups: int) -> tuple[Tensor, Tensor]:
    """Group ``(mean, var)`` of shape (N, G) from per-(n, c) plane moments (Chan's combination)."""
    n = mean_nc.shape[0]
    means, variances = mean_nc.view(n, groups, -1), var_nc.view(n, groups, -1)
    mean = means.mean(2)
    return mean, variances.mean(2) + (means - mean[:, :, None]).square().mean(2)


def batch_moments(mean_nc: Tensor, var_nc: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel batch ``(mean, var)`` of shape (C,) from per-(n, c) plane moments."""
    mean = mean_nc.mean(0)
    return mean, var_nc.mean(0) + (mean_nc - mean).square().mean(0)


class EvoNormSFunction(Function):
    """``x sigmoid(v x) / sqrt(m2 + eps) gamma + beta``, ``m2`` the group variance or mean square."""

    @staticmethod
    def forward(ctx, x, weight, bias, v1, groups, eps, centered, kernels):  # noqa: D102
        xk = kernels.prepare(x)
        c = x.shape[1]
        mean, var = combine_group_moments(*kernels.plane_moments(xk), groups)
        rstd = torch.rsqrt((var if centered else var + mean.square()) + eps)
        dtype = kernels.coefficient_dtype or xk.dtype
        v = torch.ones(c, dtype=dtype, device=x.device) if v1 is None else v1.to(dtype)
        a = (weight * _per_channel(rstd, c)).to(dtype)
        y = kernels.s_forward(xk, v, a, bias.to(dtype))
        ctx.save_for_backward(x, weight, v1, mean if centered else None, rstd)
        ctx.kernels, ctx.groups, ctx.eps, ctx.centered = kernels, groups, eps, centered
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        x, weight, v1, mean, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the composed formula
            formula = lambda x, w, v: _s_formula(x, w, v, ctx.groups, ctx.eps, ctx.centered)  # noqa: E731
            dx, dw, dv = _differentiable_grads(formula, grad, (x, weight, v1))
            return dx, dw, grad.sum((0, 2, 3)).to(weight.dtype), dv, None, None, None, None
        kernels = ctx.kernels
        xk = kernels.prepare(x)
        g = kernels.prepare_grad(grad, xk)
        n, c, h, w = x.shape
        dtype = kernels.coefficient_dtype or xk.dtype
        v = torch.ones(c, dtype=dtype, device=x.device) if v1 is None else v1.to(dtype)
        xs, x2s, g_sum = kernels.s_backward_sums(g, xk, v)
        rstd_c = _per_channel(rstd, c)
        a = weight * rstd_c
        k = -(xs * weight).view(n, rstd.shape[1], -1).sum(2) * rstd.pow(3) / (c // rstd.shape[1] * h * w)
        k0 = torch.zeros_like(k) if mean is None else -k * mean
        dx = kernels.s_backward_dx(g, xk, v, a.to(dtype), _per_channel(k, c).to(dtype), _per_channel(k0, c).to(dtype))
        dv = None if v1 is None else (x2s * a).sum(0).to(v1.dtype)
        return dx.to(x.dtype), (xs * rstd_c).sum(0).to(weight.dtype), g_sum.sum(0).to(weight.dtype), dv, None, None, None, None


def _b_instance_std(variant: str, mean_nc: Tensor, var_nc: Tensor, eps: float) -> Tensor:
    """Per-(n, c) ``q`` of the instance term ``u = p x + q``: the instance std (B0) or rms (B1, B2)."""
    return torch.sqrt((var_nc if variant == "b0" else var_nc + mean_nc.square()) + eps)


def _b_slope(variant: str, q: Tensor, v1: Tensor | None) -> Tensor:
    """Per-(n, c) ``p`` of the instance term: ``v1`` (B0), ``q`` (B1, ``(x + 1) q``) or -1 (B2)."""
    if variant == "b0":
        return v1.to(q.dtype).expand_as(q)
    return q if variant == "b1" else torch.full_like(q, -1.0)


class EvoNormBFunction(Function):
    """``x / max(sb, u) gamma + beta`` with the B series' instance term ``u = p x + q``."""

    @staticmethod
    def forward(ctx, x, weight, bias, v1, mean_nc, var_nc, batch_std, batch_mean, variant, eps, kernels):  # noqa: D102
        xk = kernels.prepare(x)
        dtype = kernels.coefficient_dtype or xk.dtype
        q = _b_instance_std(variant, mean_nc, var_nc, eps).to(dtype)
        sb = batch_std.to(dtype)
        y = kernels.b_forward(xk, sb, _b_slope(variant, q, v1), q, weight.to(dtype), bias.to(dtype))
        ctx.save_for_backward(x, weight, v1, mean_nc if variant == "b0" else None, sb, batch_mean, q)
        ctx.variant, ctx.kernels, ctx.eps = variant, kernels, eps
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        x, weight, v1, mean_nc, sb, batch_mean, q = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the composed formula
            batch_var = None if batch_mean is not None else sb.square() - ctx.eps
            formula = lambda x, w, v: _b_formula(x, w, v, batch_var, ctx.variant, ctx.eps)  # noqa: E731
            dx, dw, dv = _differentiable_grads(formula, grad, (x, weight, v1))
            return (dx, dw, grad.sum((0, 2, 3)).to(weight.dtype), dv) + (None,) * 7
        kernels = ctx.kernels
        xk = kernels.prepare(x)
        g = kernels.prepare_grad(grad, xk)
        n, c, h, w = x.shape
        p = _b_slope(ctx.variant, q, v1)
        dq, dp, dsb, g_sum, gz_sum = kernels.b_backward_sums(g, xk, sb, p, q, weight.to(p.dtype))
        k = (dq + dp if ctx.variant == "b1" else dq) / (q * (h * w))
        k0 = -k * mean_nc if ctx.variant == "b0" else torch.zeros_like(k)
        if batch_mean is not None:  # training: sb is a function of x
            k_b = dsb.sum(0) / (sb * (n * h * w))
            k, k0 = k + k_b, k0 - k_b * batch_mean
        dx = kernels.b_backward_dx(g, xk, sb, p, q, weight.to(p.dtype), k.to(p.dtype), k0.to(p.dtype))
        dv = None if v1 is None else dp.sum(0).to(v1.dtype)
        return (dx.to(x.dtype), gz_sum.sum(0).to(weight.dtype), g_sum.sum(0).to(weight.dtype), dv) + (None,) * 7
