"""The fused EvoNorm operators (``torch.ops.evonorm.*``) behind ``impl="fused"``.

:mod:`.library` defines them (schemas, fake tensors for ``torch.compile``/``torch.export``,
autograd with a hand-derived backward that keeps only the input and small statistics, a
PyTorch implementation for every device); :mod:`.extension` loads their C++ CPU kernels
(``csrc/evonorm_ops.cpp``, with the eager layers' autograd nodes in ``csrc/eager_autograd.cpp``; built at
install, else just in time, else not at all: then the PyTorch implementation runs on the CPU too);
:mod:`.triton_kernels` are the CUDA kernels.
Layers reach them through :mod:`evonorm_core.functional`, which decides per call whether the
operator or the composed formula runs (see there).
"""
from __future__ import annotations

import torch

from . import extension, library
from .extension import KernelStatus, status

__all__ = ["KernelStatus", "bypass_autograd_cache", "extension", "is_loaded", "library", "load", "status"]

_ready: set[str] = set()  # the device types load() has made the operators ready for


@torch._dynamo.assume_constant_result
def load(device_type: str = "cpu") -> bool:
    """Make the operators ready for ``device_type`` (once per type): define them and, for the
    CPU, load its C++ kernels (the first call may build them). Other devices never build, load
    or warn about CPU kernels: CUDA runs the operators' Triton kernels (imported at their first
    call), anything else their PyTorch implementation.

    Inside ``torch.compile`` this runs at trace time, so a compiled model never graph-breaks
    on it. Returns True when the C++ CPU kernels are in use (always False for other devices).
    """
    if device_type == "cpu":
        available = status().available
    else:
        lib = library.define()
        if device_type == "cuda":
            _register_cuda_kernels(lib)
        available = False
    _ready.add(device_type)
    return available


def _register_cuda_kernels(lib: torch.library.Library) -> None:
    """Make the Triton kernels the operators' CUDA implementation, where Triton can be imported."""
    try:
        # here, not at the top: importing evonorm_core must not load Triton (optional, and slow to import)
        from . import triton_kernels
    except ImportError:  # no Triton: CUDA runs the operators' PyTorch implementation
        return
    triton_kernels.register(lib)


def is_loaded(device_type: str = "cpu") -> bool:
    """Whether :func:`load` has run for ``device_type``."""
    return device_type in _ready


def bypass_autograd_cache() -> None:
    """Turn off ``torch.compile``'s AOTAutograd cache in this process.

    That on-disk cache keys a compiled training graph on the traced forward, not on a custom
    operator's registered autograd (pytorch/pytorch#144344): after the operators'
    ``setup_context`` or backward change, a cached graph keeps the old ones. On 2026-11-28 a
    compiled B0 model kept saving the instance mean that the new ``setup_context`` no longer
    keeps, and the benchmark measured the old peak memory. The suite's tools that measure or
    check compiled programs, and its tests, call this; it costs the tracing a cache hit would
    skip (Inductor's code cache, keyed on the traced graph, still applies). After upgrading this
    package, users of ``torch.compile`` can do the same (or set ``TORCHINDUCTOR_AUTOGRAD_CACHE=0``).
    """
    torch._functorch.config.enable_autograd_cache = False
