"""The fused EvoNorm operators (``torch.ops.evonorm.*``) behind ``impl="fused"``.

:mod:`.library` defines them (schemas, fake tensors for ``torch.compile``/``torch.export``,
autograd with a hand-derived backward that keeps only the input and small statistics, a
PyTorch implementation for every device); :mod:`.extension` loads their C++ CPU kernels
(``csrc/evonorm_ops.cpp``, built at install, else just in time, else not at all: then the
PyTorch implementation runs on the CPU too). Layers reach them through
:mod:`evonorm_core.functional`, which decides per call whether the operator or the composed
formula runs (see there).
"""
from __future__ import annotations

import torch

from . import extension, library
from .extension import KernelStatus, status

__all__ = ["KernelStatus", "extension", "is_loaded", "library", "load", "status"]

_loaded = False


@torch._dynamo.assume_constant_result
def load() -> bool:
    """Define the operators and load the CPU kernels (once; the first call may build them).

    Inside ``torch.compile`` this runs at trace time, so a compiled model never graph-breaks
    on it. Returns True when the C++ CPU kernels are in use.
    """
    global _loaded
    available = status().available
    _loaded = True
    return available


def is_loaded() -> bool:
    return _loaded

