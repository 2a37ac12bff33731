r"""The EvoNorm formulas as composed PyTorch ops, and the dtype and affine they share.

The one home of the paper's expressions in front of the affine (Liu et al., Tables 2
and 3), below both of their callers: :mod:`evonorm_core.functional` evaluates them for
``impl="reference"`` (and wherever the fused operators do not run), and the ``evonorm``
operators of :mod:`evonorm_core.ops` differentiate them for double backward. This module
imports neither.

.. math::
    \text{S: } \frac{x\,\sigma(v_1 x)}{\sqrt{m_2(x) + \epsilon}}, \quad
    m_2 = s^2_{w,h,c/g} \text{ (S0, S1; } v_1 = 1 \text{ for S1)},\ \mu_{w,h,c/g}(x^2) \text{ (S2)}

.. math::
    \text{B: } \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\ u(x))}, \quad
    u = v_1 x + \sqrt{s^2_{w,h}(x) + \epsilon} \text{ (B0)},\
    (x + 1)\sqrt{\mu_{w,h}(x^2) + \epsilon} \text{ (B1)},\
    \sqrt{\mu_{w,h}(x^2) + \epsilon} - x \text{ (B2)}

Every layer of the suite computes its statistics in :func:`compute_dtype` (float32;
float64 stays float64) and ends with :func:`apply_affine`, ``gamma``/``beta`` per channel
``(C,)`` or per sample ``(N, C)``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from . import statistics as stats

B_VARIANTS = ("b0", "b1", "b2")  # the B series' instance terms; the operators take the index

__all__ = ["B_VARIANTS", "apply_affine", "b_instance_term", "b_transform", "compute_dtype", "s_transform", "to_nchw",
           "upcast"]

# torch.fx.symbolic_trace records a call of upcast (through this module, ``formulas.upcast(x)``)
# as one node: it reads the dtype, which a traced value does not have.
torch.fx.wrap("upcast")


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype statistics are computed in: float64 stays, everything else is float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`compute_dtype`."""
    return x.to(compute_dtype(x))


def has_shape(t: Tensor, *sizes: int) -> bool:
    """Whether ``t.shape == sizes``. Under torch.compile compared size by size: Dynamo (torch 2.11)
    misjudged ``tuple(t.shape) in ((c,), (n, c))`` once it recompiled with dynamic shapes; eager
    compares the tuples (the loop took about a tenth of a small B0 layer's Python time)."""
    if not torch.compiler.is_compiling():
        return t.shape == sizes
    return t.dim() == len(sizes) and all(a == b for a, b in zip(t.shape, sizes))


def is_affine_shape(t: Tensor, x: Tensor) -> bool:
    """Whether ``t`` is per channel ``(C,)`` or per sample ``(N, C)`` for the NCHW ``x``: the shapes
    :func:`to_nchw` and :func:`apply_affine` take."""
    c = x.shape[1]  # not x.shape[:2]: a slice of a torch.Size is a new one, this is on every layer call's path
    return has_shape(t, c) or has_shape(t, x.shape[0], c)


def to_nchw(t: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A (C,) or per-sample (N, C) tensor as (C, 1, 1) or (N, C, 1, 1) in ``dtype``: it
    broadcasts over NCHW (and traces: no branch on its shape); None stays None."""
    return None if t is None else t.to(dtype)[..., None, None]


def apply_affine(z: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """``z * weight + bias`` with ``weight``/``bias`` None, (C,) or per sample (N, C), in ``z``'s dtype."""
    if weight is not None:
        z = z * to_nchw(weight, z.dtype)
    if bias is not None:
        z = z + to_nchw(bias, z.dtype)
    return z


def s_transform(x: Tensor, v1: Tensor | None, groups: int, eps: float, centered: bool = True) -> Tensor:
    """The S series in front of the affine: ``x sigmoid(v1 x) / sqrt(m2 + eps)``, ``m2`` the
    group variance (``centered``, S0/S1) or group mean square (S2); ``v1=None`` gates with
    ``sigmoid(x)``. ``x`` in its compute dtype."""
    m2 = stats.group_var(x, groups) if centered else stats.group_mean_square(x, groups)
    gate = x if v1 is None else x * to_nchw(v1, x.dtype)
    return x * torch.sigmoid(gate) * torch.rsqrt(m2 + eps)


def b_instance_term(x: Tensor, v1: Tensor | None, variant: str, eps: float) -> Tensor:
    """The B series' second operand of the ``max``: ``v1 x + sqrt(s2_wh + eps)`` (B0),
    ``(x + 1) sqrt(mu_wh(x^2) + eps)`` (B1), ``sqrt(mu_wh(x^2) + eps) - x`` (B2)."""
    if variant == "b0":
        return to_nchw(v1, x.dtype) * x + torch.sqrt(stats.instance_var(x) + eps)
    rms = torch.sqrt(stats.instance_mean_square(x) + eps)
    return (x + 1) * rms if variant == "b1" else rms - x


def b_transform(x: Tensor, v1: Tensor | None, batch_var: Tensor, variant: str, eps: float) -> Tensor:
    """The B series in front of the affine: ``x / max(sqrt(batch_var + eps), u)`` with
    ``batch_var`` per channel (C,), ``u`` the :func:`b_instance_term` of ``variant`` (a
    :data:`B_VARIANTS` name). ``x`` in its compute dtype."""
    batch_std = torch.sqrt(batch_var.to(x.dtype).view(1, -1, 1, 1) + eps)
    return x / torch.maximum(batch_std, b_instance_term(x, v1, variant, eps))
