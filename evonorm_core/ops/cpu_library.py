"""Builds and loads the fused C kernels of ``csrc/evonorm_cpu.c`` (CPU, float32).

The library is compiled once per machine with the system C compiler (a few seconds) into
``$EVONORM_CACHE_DIR`` (default ``~/.cache/evonorm_core``), keyed by a hash of the source,
the flags and the CPU, and loaded with :mod:`ctypes`. It depends on no PyTorch headers, so
there is no long extension build. Without a compiler :func:`load` warns once and returns
``None``, and the layers use the eager PyTorch kernels instead.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

SOURCE = Path(__file__).with_name("csrc") / "evonorm_cpu.c"
# -ffast-math lets gcc vectorize expf through glibc's libmvec. The object is linked
# without it so that crtfastmath (which would flush denormals process-wide) is not pulled in.
COMPILE_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-ffast-math", "-mrecip", "-fopenmp", "-fPIC"]
LINK_FLAGS = ["-shared", "-fopenmp", "-lmvec", "-lm"]

_I64, _INT, _PTR = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
# kernel name -> number of pointer arguments before (N, C, HW, nhwc, nt), pointers after
SIGNATURES = {
    "plane_sums": (2, 2),
    "s_forward": (4, 1),
    "s_backward_sums": (3, 3),
    "s_backward_dx": (6, 1),
    "b_forward": (6, 1),
    "b_backward_sums": (6, 5),
    "b_backward_dx": (8, 1),
}


def cache_dir() -> Path:
    return Path(os.environ.get("EVONORM_CACHE_DIR", Path.home() / ".cache" / "evonorm_core"))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("model name", "flags"))), platform.processor())
    except OSError:
        return platform.processor()


def library_path() -> Path:
    key = hashlib.sha256(
        b"\0".join(s.encode() for s in [SOURCE.read_text(), *COMPILE_FLAGS, *LINK_FLAGS, _cpu_model()])
    ).hexdigest()[:16]
    return cache_dir() / f"evonorm_cpu_{platform.machine()}_{key}.so"


def _build(target: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        obj, lib = Path(tmp) / "evonorm_cpu.o", Path(tmp) / target.name
        for cmd in ([compiler, *COMPILE_FLAGS, "-c", str(SOURCE), "-o", str(obj)], [compiler, str(obj), *LINK_FLAGS, "-o", str(lib)]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        os.replace(lib, target)  # atomic: concurrent builders never see a partial file


@functools.lru_cache(maxsize=None)
def load() -> ctypes.CDLL | None:
    """The compiled kernel library, building it on first use; ``None`` (with a warning) if it cannot be built."""
    path = library_path()
    try:
        if not path.exists():
            _build(path)
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError) as err:
        warnings.warn(f"EvoNorm CPU kernels unavailable, using the eager PyTorch kernels instead: {err}", stacklevel=2)
        return None
    for name, (before, after) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = [_PTR] * before + [_I64, _I64, _I64, _INT, _INT] + [_PTR] * after
        fn.restype = None
    return lib
