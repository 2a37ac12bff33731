"""Loads the C++ CPU kernels of the ``evonorm`` operators, in this order:

1. ``evonorm_core.ops._C``, built by the install command (``setup.py build_ext``, run by
   ``pip install -e . --no-build-isolation`` with torch installed, as ``tools/install.sh``
   does), unless its source or ``build.py`` (the flags) changed since;
2. a just-in-time build with ``torch.utils.cpp_extension.load`` into ``$EVONORM_CACHE_DIR``
   (default ``~/.cache/evonorm_core``; once per source/flags/CPU/torch version, about a
   minute), unless ``EVONORM_JIT=0``;
3. none (also with ``EVONORM_CPP=0``): the operators then run their device-generic
   PyTorch implementation on the CPU too (same formulas and memory use, slower).

Which case happened is logged once, when the kernels are first needed (a warning for
the just-in-time build and for the fallback), and :func:`status` reports it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import logging
import os
import platform
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from . import build, library

log = logging.getLogger("evonorm_core.ops")


@dataclass(frozen=True)
class KernelStatus:
    """Where the CPU kernels came from: ``installed``, ``jit`` or ``unavailable``."""

    source: str
    detail: str

    @property
    def available(self) -> bool:
        return self.source != "unavailable"

    def __str__(self) -> str:
        return f"{self.source} ({self.detail})"


def cache_dir() -> Path:
    return Path(os.environ.get("EVONORM_CACHE_DIR", Path.home() / ".cache" / "evonorm_core"))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("model name", "flags"))), platform.processor())
    except OSError:
        return platform.processor()


def jit_name() -> str:
    """The just-in-time build's name: a hash of source, flags, CPU, torch version and Python
    headers (the build command must be the same for a cached build to be reused)."""
    parts = [Path(s).read_text() for s in build.SOURCES] + build.CFLAGS + build.LDFLAGS
    parts += [_cpu_model(), torch.__version__, sysconfig.get_paths()["include"], torch.__file__]
    return "evonorm_ops_" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _installed() -> KernelStatus | None:
    spec = importlib.util.find_spec(build.NAME)
    if spec is None or spec.origin is None:
        return None
    # the sources and build.py (its flags): what setup.py compiled it from
    inputs = [*build.SOURCES, build.__file__]
    newest = max(inputs, key=os.path.getmtime)
    if os.path.getmtime(spec.origin) < os.path.getmtime(newest):
        log.warning("%s is older than %s: ignoring it (rebuild with `pip install -e . --no-build-isolation`)",
                    spec.origin, newest)
        return None
    importlib.import_module(build.NAME)
    return KernelStatus("installed", spec.origin)


def _jit() -> KernelStatus:
    name = jit_name()
    directory = cache_dir() / name
    library, done = directory / f"{name}.so", directory / f"{name}.done"
    if done.exists() and library.exists():  # built before: load it without asking the build system
        torch.ops.load_library(str(library))
        return KernelStatus("jit", f"cached {directory}")
    built = library.exists()
    if not built:
        warnings.warn(f"building the EvoNorm CPU kernels just in time into {directory} (once; about a minute). "
                      "`pip install -e . --no-build-isolation` builds them at install instead.", stacklevel=4)
    directory.mkdir(parents=True, exist_ok=True)
    cpp_log = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_log.level
    cpp_log.setLevel(logging.ERROR)  # its import warns that no CUDA runtime exists (irrelevant for CPU code)
    try:  # imported for this build only: it costs every `import evonorm_core` ~50 ms and setuptools
        from torch.utils import cpp_extension
    finally:
        cpp_log.setLevel(level)
    cpp_extension.load(name=name, sources=build.SOURCES, extra_cflags=build.CFLAGS, extra_ldflags=build.LDFLAGS,
                       build_directory=str(directory), is_python_module=False, verbose=False)
    done.touch()  # the library is complete: later processes load it directly
    return KernelStatus("jit", f"{'cached ' if built else 'built '}{directory}")


@functools.lru_cache(maxsize=None)
def status() -> KernelStatus:
    """Load the CPU kernels (once per process) and say where they came from."""
    library.define()  # the schemas come first; the C++ library only adds CPU kernels
    if os.environ.get("EVONORM_CPP", "1") == "0":
        warnings.warn("EvoNorm CPU kernels disabled by EVONORM_CPP=0; the evonorm operators use their PyTorch "
                      "implementation on the CPU (equal to rounding, slower)", stacklevel=3)
        return KernelStatus("unavailable", "disabled by EVONORM_CPP=0")
    try:
        found = _installed()
    except ImportError as err:
        log.warning("could not import %s (%s); trying a just-in-time build", build.NAME, err)
        found = None
    if found is None and os.environ.get("EVONORM_JIT", "1") != "0":
        try:
            found = _jit()
        except Exception as err:  # no compiler, no ninja, build error: fall back, once, loudly
            found = KernelStatus("unavailable", f"{type(err).__name__}: {str(err).strip()[-1500:]}")
    if found is None:
        found = KernelStatus("unavailable", "not installed and EVONORM_JIT=0")
    if found.available:
        log.info("EvoNorm CPU kernels: %s", found)
    else:
        warnings.warn(f"EvoNorm CPU kernels unavailable ({found.detail}); the evonorm operators use their "
                      "PyTorch implementation on the CPU (equal to rounding, slower)", stacklevel=3)
    return found
