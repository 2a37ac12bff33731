r"""Triton kernels of the ``evonorm`` operators for CUDA: the GPU's counterpart of the C++ CPU
kernels (same schemas, formulas and derivation as :mod:`.library` documents).

Each kernel program owns a set of whole planes and walks them in tiles of ``BLOCK_P`` pixels x
``BLOCK_C`` channels, accumulating in float32; the same kernels serve NCHW and channels_last
(``x``, ``grad``, ``y`` and ``dx`` share one layout, given by a channel and a pixel stride).

* S series: one program per (sample, group) and direction. Forward: the group's moments,
  then ``y`` (the group is read twice; the second read can come from L2). Backward: the
  per-channel sums, then ``dx``.
* B series: one program per (sample, block of channels), two launches per direction, since
  the batch statistics need every sample. Forward: the planes' moments and ``q``; then the
  batch variance (each program combines the instance moments of its channels over the batch)
  and ``y``. Backward: the per-plane sums; then ``dx``.

Moments are taken about a shift (the plane's or group's first element), so a plane with
``|mean| >> std`` keeps its variance in float32. Float64 inputs are not handled here (they
run the device-generic implementation). Tiles (:data:`TILE` elements, :data:`NUM_WARPS` warps)
are not tuned.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import checks, library

TILE = 2048  # elements per loaded tile
NUM_WARPS = 4
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def handles(x: Tensor) -> bool:
    """Whether these kernels take ``x`` (else the device-generic implementation runs)."""
    return x.dtype in DTYPES and x.numel() > 0


@functools.lru_cache(maxsize=None)
def register(lib: torch.library.Library) -> None:
    """Make these kernels the CUDA implementation of ``lib``'s operators (once), falling back to
    the device-generic implementation for the inputs :func:`handles` refuses (float64, empty)."""
    for name in ("s_forward", "s_backward", "b_forward", "b_backward"):
        lib.impl(name, _or_generic(globals()[name], getattr(library, f"generic_{name}")), "CUDA")


def _or_generic(kernel, generic):
    def run(*args):
        return kernel(*args) if handles(args[0]) else generic(*args)

    return run


# ---- tiles and layouts -------------------------------------------------------------------

def _layout(x: Tensor) -> tuple[Tensor, int, int, bool]:
    """``x`` in its operator layout with ``(channel stride, pixel stride, channels_last)``."""
    fmt = library.memory_format(x)
    x = x.contiguous(memory_format=fmt)
    c, hw = x.shape[1], x.shape[2] * x.shape[3]
    channels_last = fmt == torch.channels_last
    return x, (1 if channels_last else hw), (c if channels_last else 1), channels_last


def _tile(channels: int, hw: int, channels_last: bool) -> tuple[int, int]:
    """``(BLOCK_C, BLOCK_P)`` for tiles over ``channels`` x ``hw``: contiguous along the layout's
    fast dimension, about :data:`TILE` elements."""
    c_pow, p_pow = triton.next_power_of_2(channels), triton.next_power_of_2(hw)
    if channels_last:
        block_c = min(c_pow, 64)
        return block_c, max(1, min(p_pow, TILE // block_c))
    block_p = min(p_pow, 1024)
    return max(1, min(c_pow, TILE // block_p)), block_p


def _affine_args(t: Tensor | None, x: Tensor) -> tuple[Tensor, int]:
    """A (C,) or (N, C) parameter as ``(pointer tensor, sample stride)``; absent: ``x`` (unread)."""
    if t is None:
        return x, 0
    t = t.contiguous()
    return t, (t.shape[1] if t.dim() == 2 else 0)


@triton.jit
def _load_tile(ptr, base, c, c_mask, p, s_c, s_p, hw):
    mask = (p < hw)[:, None] & c_mask[None, :]
    offsets = base + p[:, None] * s_p + c[None, :] * s_c
    return tl.load(ptr + offsets, mask=mask, other=0.0).to(tl.float32), offsets, mask


@triton.jit
def _per_channel(ptr, n, c, c_mask, s_n, HAS: tl.constexpr, default: tl.constexpr):
    if HAS:
        return tl.load(ptr + n * s_n + c, mask=c_mask, other=default).to(tl.float32)
    return tl.full(c.shape, default, tl.float32)


# ---- S series: y = x sigmoid(v x) r gamma + beta, r per (sample, group) ------------------

@triton.jit
def _s_forward_kernel(x_ptr, y_ptr, w_ptr, b_ptr, v_ptr, mean_ptr, rstd_ptr,
                      C, HW, CG, G, w_sn, b_sn, s_c, s_p, eps,
                      CENTERED: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, HAS_V: tl.constexpr,
                      BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    pid = tl.program_id(0)
    n, g = pid // G, pid % G
    base = n.to(tl.int64) * C * HW
    c_first = g * CG
    shift = tl.load(x_ptr + base + c_first * s_c).to(tl.float32)
    acc1 = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    acc2 = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for c0 in range(0, CG, BLOCK_C):
        c = c_first + c0 + tl.arange(0, BLOCK_C)
        c_mask = c < c_first + CG
        for p0 in range(0, HW, BLOCK_P):
            x, _, mask = _load_tile(x_ptr, base, c, c_mask, p0 + tl.arange(0, BLOCK_P), s_c, s_p, HW)
            d = tl.where(mask, x - shift, 0.0)
            acc1 += d
            acc2 += d * d
    count = CG * HW
    shifted_mean = tl.sum(acc1) / count
    var = tl.maximum(tl.sum(acc2) / count - shifted_mean * shifted_mean, 0.0)
    mean = shifted_mean + shift
    rstd = tl.rsqrt((var if CENTERED else var + mean * mean) + eps)
    tl.store(mean_ptr + pid, mean)
    tl.store(rstd_ptr + pid, rstd)
    for c0 in range(0, CG, BLOCK_C):
        c = c_first + c0 + tl.arange(0, BLOCK_C)
        c_mask = c < c_first + CG
        scale = rstd * _per_channel(w_ptr, n, c, c_mask, w_sn, HAS_W, 1.0)
        beta = _per_channel(b_ptr, n, c, c_mask, b_sn, HAS_B, 0.0)
        v = _per_channel(v_ptr, 0, c, c_mask, 0, HAS_V, 1.0)
        for p0 in range(0, HW, BLOCK_P):
            x, offsets, mask = _load_tile(x_ptr, base, c, c_mask, p0 + tl.arange(0, BLOCK_P), s_c, s_p, HW)
            y = x * tl.sigmoid(v[None, :] * x) * scale[None, :] + beta[None, :]
            tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _s_backward_kernel(g_ptr, x_ptr, dx_ptr, w_ptr, v_ptr, mean_ptr, rstd_ptr, sums_ptr,
                       N, C, HW, CG, G, w_sn, s_c, s_p,
                       CENTERED: tl.constexpr, HAS_W: tl.constexpr, HAS_V: tl.constexpr,
                       BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    """``sums`` (3, N, C): dgamma, dbeta and dv1 per (sample, channel)."""
    pid = tl.program_id(0)
    n, g = pid // G, pid % G
    base = n.to(tl.int64) * C * HW
    c_first = g * CG
    rstd = tl.load(rstd_ptr + pid)
    dr = 0.0
    for c0 in range(0, CG, BLOCK_C):
        c = c_first + c0 + tl.arange(0, BLOCK_C)
        c_mask = c < c_first + CG
        gamma = _per_channel(w_ptr, n, c, c_mask, w_sn, HAS_W, 1.0)
        v = _per_channel(v_ptr, 0, c, c_mask, 0, HAS_V, 1.0)
        gxs = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
        gsum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
        dv = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
        for p0 in range(0, HW, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            x, _, _ = _load_tile(x_ptr, base, c, c_mask, p, s_c, s_p, HW)
            dy, _, _ = _load_tile(g_ptr, base, c, c_mask, p, s_c, s_p, HW)
            s = tl.sigmoid(v[None, :] * x)
            gxs += dy * x * s
            gsum += dy
            dv += dy * x * x * s * (1.0 - s)
        a = tl.sum(gxs, 0)
        tl.store(sums_ptr + n * C + c, a * rstd, mask=c_mask)
        tl.store(sums_ptr + (N + n) * C + c, tl.sum(gsum, 0), mask=c_mask)
        tl.store(sums_ptr + (2 * N + n) * C + c, tl.sum(dv, 0) * rstd * gamma, mask=c_mask)
        dr += tl.sum(a * gamma)
    k = -dr * rstd * rstd * rstd / (CG * HW)
    k0 = -k * tl.load(mean_ptr + pid) if CENTERED else 0.0
    for c0 in range(0, CG, BLOCK_C):
        c = c_first + c0 + tl.arange(0, BLOCK_C)
        c_mask = c < c_first + CG
        scale = rstd * _per_channel(w_ptr, n, c, c_mask, w_sn, HAS_W, 1.0)
        v = _per_channel(v_ptr, 0, c, c_mask, 0, HAS_V, 1.0)
        for p0 in range(0, HW, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            x, offsets, mask = _load_tile(x_ptr, base, c, c_mask, p, s_c, s_p, HW)
            dy, _, _ = _load_tile(g_ptr, base, c, c_mask, p, s_c, s_p, HW)
            vx = v[None, :] * x
            s = tl.sigmoid(vx)
            dx = dy * scale[None, :] * s * (1.0 + vx * (1.0 - s)) + k * x + k0
            tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def s_forward(x, weight, bias, v1, groups, eps, centered):
    checks.s_forward(x, weight, bias, v1, groups, eps, centered)
    x, s_c, s_p, channels_last = _layout(x)
    n, c, h, w = x.shape
    cg = c // groups
    y = library.like_x(x)
    mean = torch.empty((n, groups), dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    (w_t, w_sn), (b_t, b_sn) = _affine_args(weight, x), _affine_args(bias, x)
    block_c, block_p = _tile(cg, h * w, channels_last)
    _s_forward_kernel[(n * groups,)](
        x, y, w_t, b_t, x if v1 is None else v1.contiguous(), mean, rstd, c, h * w, cg, groups, w_sn, b_sn,
        s_c, s_p, eps, CENTERED=centered, HAS_W=weight is not None, HAS_B=bias is not None, HAS_V=v1 is not None,
        BLOCK_C=block_c, BLOCK_P=block_p, num_warps=NUM_WARPS)
    return y, mean, rstd


def s_backward(grad, x, weight, bias, v1, mean, rstd, groups, centered, output_mask):
    checks.s_backward(grad, x, weight, bias, v1, mean, rstd, groups, centered, output_mask)
    x, s_c, s_p, channels_last = _layout(x)
    grad = grad.contiguous(memory_format=library.memory_format(x))
    n, c, h, w = x.shape
    cg = c // groups
    dx = library.like_x(x)
    sums = torch.empty((3, n, c), dtype=torch.float32, device=x.device)
    w_t, w_sn = _affine_args(weight, x)
    block_c, block_p = _tile(cg, h * w, channels_last)
    _s_backward_kernel[(n * groups,)](
        grad, x, dx, w_t, x if v1 is None else v1.contiguous(), mean.contiguous(), rstd.contiguous(), sums,
        n, c, h * w, cg, groups, w_sn, s_c, s_p, CENTERED=centered, HAS_W=weight is not None,
        HAS_V=v1 is not None, BLOCK_C=block_c, BLOCK_P=block_p, num_warps=NUM_WARPS)
    dv = sums[2].sum(0).to(v1.dtype) if output_mask[2] and v1 is not None else library.unrequested(x)
    return (dx, library.reduce_like(sums[0], weight, output_mask[0], x),
            library.reduce_like(sums[1], bias, output_mask[1], x), dv)


# ---- B series: y = x / max(sb, p x + q) gamma + beta --------------------------------------

@triton.jit
def _b_coefficients(variant: tl.constexpr, v_ptr, c, c_mask, q):
    """``p`` of ``u = p x + q`` per channel of the tile: v1 (B0), q (B1), -1 (B2)."""
    if variant == 0:
        return tl.load(v_ptr + c, mask=c_mask, other=0.0).to(tl.float32)
    if variant == 1:
        return q
    return tl.full(q.shape, -1.0, tl.float32)


@triton.jit
def _b_backward_terms(bvar_ptr, q_ptr, v_ptr, w_ptr, n, C, c, c_mask, w_sn, eps, variant: tl.constexpr,
                      HAS_W: tl.constexpr):
    """Per channel of the tile, what both backward launches need: ``sb``, ``q``, ``p`` and ``gamma``."""
    sb = tl.sqrt(tl.load(bvar_ptr + c, mask=c_mask, other=1.0).to(tl.float32) + eps)
    q = tl.load(q_ptr + n * C + c, mask=c_mask, other=1.0)
    return sb, q, _b_coefficients(variant, v_ptr, c, c_mask, q), _per_channel(w_ptr, n, c, c_mask, w_sn, HAS_W, 1.0)


@triton.jit
def _b_denominator(x, p, q, sb):
    """``(to_u, to_sb, d)`` for a tile: ``u = p x + q``, ``d = max(sb, u)`` as the forward took it, and which of the
    two the gradient reaching ``d`` goes to, as in ``torch.maximum``'s backward: the larger, ``sb`` at a tie, both
    where either is NaN."""
    u = p[None, :] * x + q[None, :]
    sb = sb[None, :]
    return ~(sb >= u), ~(u > sb), tl.maximum(sb, u, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _b_moments_kernel(x_ptr, mean_ptr, var_ptr, q_ptr, C, HW, s_c, s_p, eps, variant: tl.constexpr,
                      BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    """Per plane: the mean, the variance and ``q`` (B0: sqrt(var + eps), else sqrt(mean(x^2) + eps))."""
    n = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    base = n.to(tl.int64) * C * HW
    shift = tl.load(x_ptr + base + c * s_c, mask=c_mask, other=0.0).to(tl.float32)
    acc1 = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    acc2 = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for p0 in range(0, HW, BLOCK_P):
        x, _, mask = _load_tile(x_ptr, base, c, c_mask, p0 + tl.arange(0, BLOCK_P), s_c, s_p, HW)
        d = tl.where(mask, x - shift[None, :], 0.0)
        acc1 += d
        acc2 += d * d
    shifted_mean = tl.sum(acc1, 0) / HW
    var = tl.maximum(tl.sum(acc2, 0) / HW - shifted_mean * shifted_mean, 0.0)
    mean = shifted_mean + shift
    q = tl.sqrt((var if variant == 0 else var + mean * mean) + eps)
    tl.store(mean_ptr + n * C + c, mean, mask=c_mask)
    tl.store(var_ptr + n * C + c, var, mask=c_mask)
    tl.store(q_ptr + n * C + c, q, mask=c_mask)


@triton.jit
def _batch_moments(mean_ptr, var_ptr, N, C, c, c_mask):
    """The batch's mean and (biased) variance per channel from the planes' moments."""
    total = tl.zeros(c.shape, tl.float32)
    for i in range(0, N):
        total += tl.load(mean_ptr + i * C + c, mask=c_mask, other=0.0)
    batch_mean = total / N
    spread = tl.zeros(c.shape, tl.float32)
    for i in range(0, N):
        d = tl.load(mean_ptr + i * C + c, mask=c_mask, other=0.0) - batch_mean
        spread += tl.load(var_ptr + i * C + c, mask=c_mask, other=0.0) + d * d
    return batch_mean, spread / N


@triton.jit
def _b_forward_kernel(x_ptr, y_ptr, w_ptr, b_ptr, v_ptr, mean_ptr, var_ptr, q_ptr, bvar_ptr, bmean_out, bvar_out,
                      N, C, HW, w_sn, b_sn, s_c, s_p, eps, variant: tl.constexpr, FROM_X: tl.constexpr,
                      HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    n = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    base = n.to(tl.int64) * C * HW
    if FROM_X:
        batch_mean, batch_var = _batch_moments(mean_ptr, var_ptr, N, C, c, c_mask)
        tl.store(bmean_out + c, batch_mean, mask=c_mask & (n == 0))
        tl.store(bvar_out + c, batch_var, mask=c_mask & (n == 0))
    else:
        batch_var = tl.load(bvar_ptr + c, mask=c_mask, other=1.0).to(tl.float32)
    sb = tl.sqrt(batch_var + eps)
    q = tl.load(q_ptr + n * C + c, mask=c_mask, other=1.0)
    p = _b_coefficients(variant, v_ptr, c, c_mask, q)
    gamma = _per_channel(w_ptr, n, c, c_mask, w_sn, HAS_W, 1.0)
    beta = _per_channel(b_ptr, n, c, c_mask, b_sn, HAS_B, 0.0)
    for p0 in range(0, HW, BLOCK_P):
        x, offsets, mask = _load_tile(x_ptr, base, c, c_mask, p0 + tl.arange(0, BLOCK_P), s_c, s_p, HW)
        d = tl.maximum(sb[None, :], p[None, :] * x + q[None, :], propagate_nan=tl.PropagateNan.ALL)
        y = x / d * gamma[None, :] + beta[None, :]
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _b_backward_sums_kernel(g_ptr, x_ptr, w_ptr, v_ptr, q_ptr, bvar_ptr, sums_ptr, N, C, HW, w_sn, s_c, s_p, eps,
                            variant: tl.constexpr, HAS_W: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    """``sums`` (5, N, C) per plane, with ``dd = -g gamma x / d^2``: sum dd [to u], sum dd x [to u],
    sum dd [to sb], sum g x / d (dgamma), sum g (dbeta) (see _b_denominator)."""
    n = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    base = n.to(tl.int64) * C * HW
    sb, q, p, gamma = _b_backward_terms(bvar_ptr, q_ptr, v_ptr, w_ptr, n, C, c, c_mask, w_sn, eps, variant, HAS_W)
    u_sum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    ux_sum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    b_sum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    gxd_sum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    g_sum = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for p0 in range(0, HW, BLOCK_P):
        p_idx = p0 + tl.arange(0, BLOCK_P)
        x, _, _ = _load_tile(x_ptr, base, c, c_mask, p_idx, s_c, s_p, HW)
        dy, _, _ = _load_tile(g_ptr, base, c, c_mask, p_idx, s_c, s_p, HW)
        to_u, to_sb, d = _b_denominator(x, p, q, sb)
        gxd = dy * x / d
        dd = -gxd * gamma[None, :] / d
        dd_u = tl.where(to_u, dd, 0.0)
        u_sum += dd_u
        ux_sum += dd_u * x
        b_sum += tl.where(to_sb, dd, 0.0)
        gxd_sum += gxd
        g_sum += dy
    plane = n * C + c
    tl.store(sums_ptr + plane, tl.sum(u_sum, 0), mask=c_mask)
    tl.store(sums_ptr + N * C + plane, tl.sum(ux_sum, 0), mask=c_mask)
    tl.store(sums_ptr + 2 * N * C + plane, tl.sum(b_sum, 0), mask=c_mask)
    tl.store(sums_ptr + 3 * N * C + plane, tl.sum(gxd_sum, 0), mask=c_mask)
    tl.store(sums_ptr + 4 * N * C + plane, tl.sum(g_sum, 0), mask=c_mask)


@triton.jit
def _b_backward_kernel(g_ptr, x_ptr, dx_ptr, w_ptr, v_ptr, mean_ptr, q_ptr, bmean_ptr, bvar_ptr, sums_ptr,
                       N, C, HW, w_sn, s_c, s_p, eps, variant: tl.constexpr, FROM_X: tl.constexpr,
                       HAS_W: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    """``dx = g gamma / d - [to u] g gamma x p / d^2 + k x + k0`` with ``k``, ``k0`` from the sums."""
    n = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    base = n.to(tl.int64) * C * HW
    plane = n * C + c
    sb, q, p, gamma = _b_backward_terms(bvar_ptr, q_ptr, v_ptr, w_ptr, n, C, c, c_mask, w_sn, eps, variant, HAS_W)
    u_sum = tl.load(sums_ptr + plane, mask=c_mask, other=0.0)
    if variant == 1:
        u_sum += tl.load(sums_ptr + N * C + plane, mask=c_mask, other=0.0)
    k = u_sum / (q * HW)
    k0 = -k * tl.load(mean_ptr + plane, mask=c_mask, other=0.0) if variant == 0 else tl.zeros(c.shape, tl.float32)
    if FROM_X:
        dsb = tl.zeros(c.shape, tl.float32)
        for i in range(0, N):
            dsb += tl.load(sums_ptr + 2 * N * C + i * C + c, mask=c_mask, other=0.0)
        k_b = dsb / (sb * N * HW)
        k += k_b
        k0 -= k_b * tl.load(bmean_ptr + c, mask=c_mask, other=0.0)
    for p0 in range(0, HW, BLOCK_P):
        p_idx = p0 + tl.arange(0, BLOCK_P)
        x, offsets, mask = _load_tile(x_ptr, base, c, c_mask, p_idx, s_c, s_p, HW)
        dy, _, _ = _load_tile(g_ptr, base, c, c_mask, p_idx, s_c, s_p, HW)
        to_u, _, d = _b_denominator(x, p, q, sb)
        gd = dy * gamma[None, :] / d
        dx = gd - tl.where(to_u, gd * x / d * p[None, :], 0.0) + k[None, :] * x + k0[None, :]
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _b_grid(x: Tensor, channels_last: bool) -> tuple[tuple[int, int], int, int]:
    n, c, h, w = x.shape
    block_c, block_p = _tile(c, h * w, channels_last)
    return (n, triton.cdiv(c, block_c)), block_c, block_p


def b_forward(x, weight, bias, v1, batch_var, variant, eps):
    checks.b_forward(x, weight, bias, v1, batch_var, variant, eps)
    x, s_c, s_p, channels_last = _layout(x)
    n, c, h, w = x.shape
    grid, block_c, block_p = _b_grid(x, channels_last)
    mean, var, q = (torch.empty((n, c), dtype=torch.float32, device=x.device) for _ in range(3))
    _b_moments_kernel[grid](x, mean, var, q, c, h * w, s_c, s_p, eps, variant=variant,
                            BLOCK_C=block_c, BLOCK_P=block_p, num_warps=NUM_WARPS)
    from_x = batch_var is None
    batch_mean, own_var = (torch.empty(c if from_x else 0, dtype=torch.float32, device=x.device) for _ in range(2))
    y = library.like_x(x)
    (w_t, w_sn), (b_t, b_sn) = _affine_args(weight, x), _affine_args(bias, x)
    _b_forward_kernel[grid](
        x, y, w_t, b_t, x if v1 is None else v1.contiguous(), mean, var, q,
        own_var if from_x else batch_var.contiguous(), batch_mean, own_var, n, c, h * w, w_sn, b_sn, s_c, s_p, eps,
        variant=variant, FROM_X=from_x, HAS_W=weight is not None, HAS_B=bias is not None,
        BLOCK_C=block_c, BLOCK_P=block_p, num_warps=NUM_WARPS)
    return y, mean, q, batch_mean, own_var


def b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var, variant, eps, batch_from_x, output_mask):
    checks.b_backward(grad, x, weight, bias, v1, mean, q, batch_mean, batch_var, variant, eps, batch_from_x, output_mask)
    x, s_c, s_p, channels_last = _layout(x)
    grad = grad.contiguous(memory_format=library.memory_format(x))
    n, c, h, w = x.shape
    grid, block_c, block_p = _b_grid(x, channels_last)
    w_t, w_sn = _affine_args(weight, x)
    v_t = x if v1 is None else v1.contiguous()
    batch_var = batch_var.contiguous()
    if mean.numel() == 0:  # autograd keeps it on CUDA; a caller may pass none (the operator's contract)
        mean = library.instance_mean(x.to(library.compute_dtype(x)))
    q = q.contiguous()
    sums = torch.empty((5, n, c), dtype=torch.float32, device=x.device)
    options = dict(variant=variant, HAS_W=weight is not None, BLOCK_C=block_c, BLOCK_P=block_p, num_warps=NUM_WARPS)
    _b_backward_sums_kernel[grid](grad, x, w_t, v_t, q, batch_var, sums, n, c, h * w, w_sn, s_c, s_p,
                                  eps, **options)
    dx = library.like_x(x)
    _b_backward_kernel[grid](grad, x, dx, w_t, v_t, mean.contiguous(), q,
                             batch_mean if batch_from_x else batch_var, batch_var, sums, n, c, h * w, w_sn, s_c, s_p,
                             eps, FROM_X=batch_from_x, **options)
    dv = library.unrequested(x)
    if output_mask[2] and variant == 0 and v1 is not None:
        dv = sums[1].sum(0).to(v1.dtype)
    dvar = library.unrequested(x)
    if output_mask[3] and not batch_from_x:
        dvar = (sums[2].sum(0) / (2 * torch.sqrt(batch_var.float() + eps))).to(batch_var.dtype)
    return (dx, library.reduce_like(sums[3], weight, output_mask[0], x),
            library.reduce_like(sums[4], bias, output_mask[1], x), dv, dvar)
