"""The seven primitive kernels the fused EvoNorm functions are built from, in three backends.

Each primitive is one pass over a full-size tensor; everything else the layers compute is
on per-(n, c) or per-channel vectors. Shapes: ``x``, ``g`` (the incoming gradient) are
(N, C, H, W); per-(n, c) coefficients are (N, C); per-channel ones (C,).

* ``plane_moments(x) -> (mean, var)``: per-(n, c) mean and biased variance over H, W.
* ``s_forward(x, v, a, b) = x * sigmoid(v x) * a + b``
* ``s_backward_sums(g, x, v) -> (sum g x s, sum g x^2 s (1 - s), sum g)`` over H, W, with
  ``s = sigmoid(v x)``
* ``s_backward_dx(g, x, v, a, k, k0) = g a (s + v x s (1 - s)) + k x + k0``
* ``b_forward(x, sb, p, q, gamma, beta) = x / max(sb, p x + q) * gamma + beta``
* ``b_backward_sums(g, x, sb, p, q, gamma) -> (U, UX, B, G, GZ)``: with ``d = max(sb, u)``,
  ``u = p x + q``, ``z = x / d`` and ``dd = -g gamma z / d``: ``U = sum dd`` where
  ``u > sb``, ``UX = sum dd x`` there, ``B = sum dd`` elsewhere, ``G = sum g``, ``GZ = sum g z``
* ``b_backward_dx(g, x, sb, p, q, gamma, k, k0) = g gamma / d + [u > sb] dd p + k x + k0``

Backends: :class:`CpuKernels` (the C library, float32, NCHW or channels_last),
:class:`EagerKernels` (PyTorch ops; any device and dtype, the always-correct fallback) and
the same eager code under ``torch.compile`` (:func:`compiled_kernels`, used on CUDA).
"""
from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

PRIMITIVES = (
    "plane_moments",
    "s_forward",
    "s_backward_sums",
    "s_backward_dx",
    "b_forward",
    "b_backward_sums",
    "b_backward_dx",
)


def _nc(t: Tensor) -> Tensor:
    return t[:, :, None, None]


def _c(t: Tensor) -> Tensor:
    return t[None, :, None, None]


def _b_branch(x: Tensor, sb: Tensor, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor]:
    """``(u > sb, max(sb, u))`` for ``u = p x + q``."""
    u = torch.addcmul(_nc(q), _nc(p), x)
    take_u = u > _c(sb)
    return take_u, torch.where(take_u, u, _c(sb))


class EagerKernels:
    """The primitives as PyTorch ops, computed in float32 (float64 stays float64)."""

    name = "eager"
    coefficient_dtype = None  # that of the prepared input

    @staticmethod
    def prepare(x: Tensor) -> Tensor:
        return x if x.dtype in (torch.float32, torch.float64) else x.float()

    @staticmethod
    def prepare_grad(g: Tensor, x: Tensor) -> Tensor:
        return g.to(x.dtype)

    @staticmethod
    def plane_moments(x: Tensor) -> tuple[Tensor, Tensor]:
        var, mean = torch.var_mean(x, dim=(2, 3), unbiased=False)
        return mean, var

    @staticmethod
    def s_forward(x: Tensor, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return torch.addcmul(_c(b), torch.sigmoid(x * _c(v)), x * _nc(a))

    @staticmethod
    def s_backward_sums(g: Tensor, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        s = torch.sigmoid(x * _c(v))
        gf = g * x * s
        return gf.sum((2, 3)), (gf * x * (1 - s)).sum((2, 3)), g.sum((2, 3))

    @staticmethod
    def s_backward_dx(g: Tensor, x: Tensor, v: Tensor, a: Tensor, k: Tensor, k0: Tensor) -> Tensor:
        s = torch.sigmoid(x * _c(v))
        return g * _nc(a) * s * (1 + _c(v) * x * (1 - s)) + _nc(k) * x + _nc(k0)

    @staticmethod
    def b_forward(x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor, beta: Tensor) -> Tensor:
        return torch.addcmul(_c(beta), x / _b_branch(x, sb, p, q)[1], _c(gamma))

    @staticmethod
    def b_backward_sums(g: Tensor, x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor) -> tuple[Tensor, ...]:
        take_u, d = _b_branch(x, sb, p, q)
        z = x / d
        dd = -g * _c(gamma) * z / d
        dd_u = torch.where(take_u, dd, 0)
        return dd_u.sum((2, 3)), (dd_u * x).sum((2, 3)), (dd - dd_u).sum((2, 3)), g.sum((2, 3)), (g * z).sum((2, 3))

    @staticmethod
    def b_backward_dx(
        g: Tensor, x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor, k: Tensor, k0: Tensor
    ) -> Tensor:
        take_u, d = _b_branch(x, sb, p, q)
        gd = g * _c(gamma) / d
        return gd - torch.where(take_u, gd * x / d * _nc(p), 0) + _nc(k) * x + _nc(k0)


class _CompiledKernels:
    """:class:`EagerKernels` under ``torch.compile(dynamic=True)``, compiled lazily per
    primitive (symbolic shapes, so few recompilations); Triton kernels on CUDA."""

    name = "compiled"
    coefficient_dtype = None
    prepare = staticmethod(EagerKernels.prepare)
    prepare_grad = staticmethod(EagerKernels.prepare_grad)

    def __getattr__(self, primitive: str):
        if primitive not in PRIMITIVES:
            raise AttributeError(primitive)
        fn = torch.compile(getattr(EagerKernels, primitive), dynamic=True)
        setattr(self, primitive, fn)
        return fn


@functools.lru_cache(maxsize=None)
def compiled_kernels() -> _CompiledKernels:
    return _CompiledKernels()


def _is_dense_float32(t: Tensor) -> bool:
    return t.dtype == torch.float32 and t.is_contiguous()


class CpuKernels:
    """The primitives from the C library of :mod:`.cpu_library` (float32, contiguous NCHW or channels_last)."""

    name = "cpu"
    coefficient_dtype = torch.float32

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    @staticmethod
    def prepare(x: Tensor) -> Tensor:
        x = x.float()
        if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
            return x
        return x.contiguous()

    @staticmethod
    def prepare_grad(g: Tensor, x: Tensor) -> Tensor:
        """``g`` in float32 and in the memory layout of the prepared ``x``."""
        layout = torch.contiguous_format if x.is_contiguous() else torch.channels_last
        return g.to(torch.float32).contiguous(memory_format=layout)

    def _call(self, primitive: str, x: Tensor, inputs: tuple[Tensor, ...], outputs: list[Tensor]) -> None:
        """Run ``primitive``; full-size inputs are in ``x``'s layout, coefficients are made dense float32."""
        n, c, h, w = x.shape
        nhwc = not x.is_contiguous()
        inputs = tuple(t if t.dim() == 4 or _is_dense_float32(t) else t.to(torch.float32).contiguous() for t in inputs)
        args = [t.data_ptr() for t in inputs] + [n, c, h * w, int(nhwc), torch.get_num_threads()]
        getattr(self.lib, primitive)(*args, *[t.data_ptr() for t in outputs])

    def _elementwise(self, primitive: str, x: Tensor, *inputs: Tensor) -> Tensor:
        out = torch.empty_like(x)
        self._call(primitive, x, inputs, [out])
        return out

    def _sums(self, primitive: str, count: int, x: Tensor, *inputs: Tensor) -> list[Tensor]:
        outs = [x.new_empty(x.shape[:2], dtype=torch.float64) for _ in range(count)]
        self._call(primitive, x, inputs, outs)
        return outs

    def plane_moments(self, x: Tensor) -> tuple[Tensor, Tensor]:
        shift = x[:, :, 0, 0]  # sums of x - shift stay exact for near-constant planes
        s1, s2 = self._sums("plane_sums", 2, x, x, shift)
        count = x.shape[2] * x.shape[3]
        offset = s1 / count
        return shift.double() + offset, (s2 / count - offset.square()).clamp_min_(0)

    def s_forward(self, x: Tensor, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return self._elementwise("s_forward", x, x, v, a, b)

    def s_backward_sums(self, g: Tensor, x: Tensor, v: Tensor) -> list[Tensor]:
        return self._sums("s_backward_sums", 3, x, g, x, v)

    def s_backward_dx(self, g: Tensor, x: Tensor, v: Tensor, a: Tensor, k: Tensor, k0: Tensor) -> Tensor:
        return self._elementwise("s_backward_dx", x, g, x, v, a, k, k0)

    def b_forward(self, x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor, beta: Tensor) -> Tensor:
        return self._elementwise("b_forward", x, x, sb, p, q, gamma, beta)

    def b_backward_sums(self, g: Tensor, x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor) -> list[Tensor]:
        return self._sums("b_backward_sums", 5, x, g, x, sb, p, q, gamma)

    def b_backward_dx(
        self, g: Tensor, x: Tensor, sb: Tensor, p: Tensor, q: Tensor, gamma: Tensor, k: Tensor, k0: Tensor
    ) -> Tensor:
        return self._elementwise("b_backward_dx", x, g, x, sb, p, q, gamma, k, k0)
