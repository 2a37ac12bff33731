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
from typing import NamedTuple

import torch
from torch import Tensor

from . import cpu_library
from .functions import B_VARIANTS, EvoNormBFunction, EvoNormSFunction, batch_moments
from .kernels import CpuKernels, EagerKernels, compiled_kernels

BACKENDS = ("auto", "cpu", "compiled", "eager")

__all__ = ["BACKENDS", "B_VARIANTS", "BatchMoments", "fused_batch_moments", "fused_evonorm_b", "fused_evonorm_s", "select_kernels"]


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


class BatchMoments(NamedTuple):
    """Per-(n, c) plane moments (N, C) and the per-channel batch moments (C,) they combine to."""

    mean_nc: Tensor
    var_nc: Tensor
    mean: Tensor
    var: Tensor


def fused_batch_moments(x: Tensor) -> BatchMoments:
    """Plane and batch moments of ``x`` from the selected kernels (no gradient)."""
    kernels = select_kernels(x)
    with torch.no_grad():
        mean_nc, var_nc = kernels.plane_moments(kernels.prepare(x))
        return BatchMoments(mean_nc, var_nc, *batch_moments(mean_nc, var_nc))


def fused_evonorm_s(
    x: Tensor, weight: Tensor, bias: Tensor, v1: Tensor | None, groups: int, eps: float, centered: bool = True
) -> Tensor:
    """EvoNorm-S0/S1/S2 on the fused kernels (per-channel weight and bias); see
    :func:`evonorm_core.functional.evonorm_s`."""
    return EvoNormSFunction.apply(x, weight, bias, v1, groups, eps, centered, select_kernels(x))


def fused_evonorm_b(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    v1: Tensor | None,
    variant: str,
    eps: float,
    running_var: Tensor | None,
    batch: BatchMoments | None,
) -> Tensor:
    """EvoNorm-B0/B1/B2 on the fused kernels with the batch moments ``batch`` (training) or
    ``running_var`` (eval); see :func:`evonorm_core.functional.evonorm_b`."""
    kernels = select_kernels(x)
    with torch.no_grad():
        if batch is None:
            mean_nc, var_nc = kernels.plane_moments(kernels.prepare(x))
            batch_mean, batch_var = None, running_var.to(var_nc.dtype)
        else:
            mean_nc, var_nc, batch_mean, batch_var = batch
        batch_std = torch.sqrt(batch_var + eps)
    return EvoNormBFunction.apply(x, weight, bias, v1, mean_nc, var_nc, batch_std, batch_mean, variant, eps, kernels)


# Until the layers call evonorm_core.functional, these keep their old call signatures.
def affine(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    from ..functional import affine

    return affine(x, weight, bias)


def evonorm_s(x, weight, bias, v1, groups, eps, centered=True):  # noqa: D103
    from ..functional import evonorm_s

    return evonorm_s(x, weight, bias, v1, groups=groups, eps=eps, centered=centered)


def evonorm_b(x, weight, bias, v1, variant, eps, running_var, training, momentum=0.1, num_batches_tracked=None):  # noqa: D103
    from ..functional import evonorm_b

    return evonorm_b(x, weight, bias, v1, running_var, num_batches_tracked, variant=variant, training=training,
                     momentum=momentum, eps=eps)
