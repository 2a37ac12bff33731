"""Fast, memory-lean EvoNorm kernels: the functional API behind the layers' ``impl="fused"``.

Backends (``EVONORM_BACKEND``, read on every call; default ``auto``):

* ``cpu``: fused C kernels (:mod:`.cpu_library`) for float32/float16/bfloat16 CPU tensors,
  NCHW or channels_last; float64 goes to ``eager``.
* ``compiled``: the eager kernels under ``torch.compile(dynamic=True)`` (Triton on CUDA).
* ``eager``: plain PyTorch ops, any device and dtype; the always-correct fallback.
* ``auto``: ``compiled`` for CUDA tensors, ``cpu`` for CPU tensors (``eager`` if the C
  library cannot be built, e.g. without a C compiler).
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor

from . import cpu_library
from .functions import B_VARIANTS, EvoNormBFunction, EvoNormSFunction, batch_moments
from .kernels import CpuKernels, EagerKernels, compiled_kernels

BACKENDS = ("auto", "cpu", "compiled", "eager")

__all__ = ["BACKENDS", "B_VARIANTS", "affine", "evonorm_b", "evonorm_s", "select_kernels"]


def select_kernels(x: Tensor):
    """The kernel backend for input ``x`` under the current ``EVONORM_BACKEND``."""
    backend = os.environ.get("EVONORM_BACKEND", "auto")
    if backend not in BACKENDS:
        raise ValueError(f"EVONORM_BACKEND={backend!r} is not a backend; accepted: {list(BACKENDS)}")
    if backend == "compiled" or (backend == "auto" and x.is_cuda):
        return compiled_kernels()
    if backend != "eager" and x.device.type == "cpu" and x.dtype != torch.float64:
        lib = cpu_library.load()
        if lib is not None:
            return CpuKernels(lib)
    return EagerKernels


def affine(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``x * weight + bias`` per channel (an EvoNorm with ``nonlinearity=False``) in ``x``'s dtype.

    Computed as an inference-mode batch norm with mean 0, variance 1 and eps 0: PyTorch's
    fused kernels then give the forward in one pass and ``dx``, ``dweight``, ``dbias`` in
    one backward call (half the time of ``addcmul`` and its autograd), keeping only ``x``.
    """
    zeros = torch.zeros_like(weight)
    return F.batch_norm(x, zeros, torch.ones_like(weight), weight, bias, training=False, momentum=0.0, eps=0.0)


def evonorm_s(
    x: Tensor, weight: Tensor, bias: Tensor, v1: Tensor | None, groups: int, eps: float, centered: bool = True
) -> Tensor:
    """EvoNorm-S0 (``v1`` given), S1 (``v1=None``) or S2 (``v1=None, centered=False``):
    ``x sigmoid(v1 x) / sqrt(m2 + eps) * weight + bias``, ``m2`` the variance (``centered``)
    or mean square over each sample's ``groups`` groups of channels."""
    return EvoNormSFunction.apply(x, weight, bias, v1, groups, eps, centered, select_kernels(x))


def evonorm_b(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    v1: Tensor | None,
    variant: str,
    eps: float,
    running_var: Tensor,
    training: bool,
    momentum: float = 0.1,
    num_batches_tracked: Tensor | None = None,
) -> Tensor:
    """EvoNorm-B0/B1/B2 (``variant`` in :data:`B_VARIANTS`; ``v1`` only for B0).

    In training the batch variance is used and ``running_var`` (and ``num_batches_tracked``)
    are updated in place as ``BatchNorm2d`` does (unbiased variance, ``momentum``); in eval
    ``running_var`` is used and receives no gradient.
    """
    if variant not in B_VARIANTS:
        raise ValueError(f"unknown EvoNorm-B variant {variant!r}; accepted: {list(B_VARIANTS)}")
    kernels = select_kernels(x)
    with torch.no_grad():
        mean_nc, var_nc = kernels.plane_moments(kernels.prepare(x))
        if training:
            batch_mean, batch_var = batch_moments(mean_nc, var_nc)
            count = x.numel() // x.shape[1]
            unbiased = batch_var * (count / (count - 1)) if count > 1 else batch_var
            running_var.lerp_(unbiased.to(running_var.dtype), momentum)
            if num_batches_tracked is not None:
                num_batches_tracked.add_(1)
        else:
            batch_mean, batch_var = None, running_var.to(var_nc.dtype)
        batch_std = torch.sqrt(batch_var + eps)
    return EvoNormBFunction.apply(x, weight, bias, v1, mean_nc, var_nc, batch_std, batch_mean, variant, eps, kernels)
