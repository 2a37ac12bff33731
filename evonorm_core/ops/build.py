"""How the EvoNorm CPU kernels (``csrc/evonorm_ops.cpp``, ``csrc/eager_autograd.cpp``) are built: one source of truth
for ``setup.py`` (``build_ext``, which loads this file by path) and the just-in-time build
of :mod:`evonorm_core.ops.extension`. Imports only the standard library and torch.
"""
from __future__ import annotations

import os
from pathlib import Path

NAME = "evonorm_core.ops._C"
SOURCES = [str(Path(__file__).resolve().with_name("csrc") / name) for name in ("evonorm_ops.cpp", "eager_autograd.cpp")]
# Auto-vectorized loops: sums may be reassociated (-fassociative-math, which needs
# -fno-signed-zeros -fno-trapping-math), but no -ffast-math: NaN and inf propagate; -march=native
# because the kernels are built on the machine that runs them (install or first use).
# OpenMP: at::parallel_for uses the torch thread pool (torch.set_num_threads).
CFLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fno-math-errno", "-fassociative-math",
          "-fno-signed-zeros", "-fno-trapping-math"]
LDFLAGS = ["-fopenmp"]


def relative_sources(root: str | os.PathLike) -> list[str]:
    """:data:`SOURCES` relative to ``root`` (setup.py wants paths relative to itself)."""
    return [os.path.relpath(s, root) for s in SOURCES]


def extension(root: str | os.PathLike = "."):
    """The ``setuptools`` extension for ``setup.py``: ``CppExtension(NAME, ...)``."""
    # imported here: at the top it would cost every `import evonorm_core` (extension.py reads
    # this module's flags) ~50 ms, setuptools and a 'No CUDA runtime' warning, for setup.py's class
    from torch.utils.cpp_extension import CppExtension

    return CppExtension(NAME, relative_sources(root), extra_compile_args=CFLAGS, extra_link_args=LDFLAGS)
