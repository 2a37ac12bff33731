"""The ``evonorm`` operators' argument checks for their Python implementations (the Triton kernels
and the device-generic one), the same checks with the same messages as the C++ CPU kernels'
(``csrc/evonorm_ops.cpp``): every implementation refuses a tensor of the wrong size before reading
it, naming the operator, the argument, the size expected and the one given. One function per
operator, taking that operator's arguments.
"""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ..formulas import is_affine_shape


def _require(ok: bool, op: str, message: str) -> None:
    if not ok:
        raise RuntimeError(f"evonorm::{op}: {message}")


def _input(op: str, x: Tensor) -> None:
    _require(x.dim() == 4, op, f"expected an NCHW tensor, got {x.dim()} dims")
    _require(x.is_floating_point(), op, f"expected a floating-point tensor, got {x.dtype}")
    _require(x.numel() > 0, op, f"expected a non-empty tensor, got shape {list(x.shape)}")


def _params(op: str, x: Tensor, **params: Tensor | None) -> None:
    """weight and bias: absent, per channel (C,) or per sample (N, C)."""
    n, c = x.shape[:2]
    for name, p in params.items():
        if p is not None:
            _require(is_affine_shape(p, x), op,
                     f"{name} must be (C,) = ({c},) or (N, C) = ({n}, {c}), got shape {list(p.shape)}")


def _v1(op: str, x: Tensor, v1: Tensor | None) -> None:
    """v1: absent or per channel (C,); the kernels read one value per channel."""
    if v1 is not None:
        c = x.shape[1]
        _require(v1.dim() == 1 and v1.shape[0] == c, op, f"v1 must be (C,) = ({c},), got shape {list(v1.shape)}")


def _numel(op: str, t: Tensor, numel: int, name: str) -> None:
    _require(t.numel() == numel, op, f"{name} must have {numel} elements, got shape {list(t.shape)}")


def _grad(op: str, grad: Tensor, x: Tensor) -> None:
    _require(grad.shape == x.shape, op, f"grad must have x's shape {list(x.shape)}, got {list(grad.shape)}")


def _groups(op: str, groups: int, c: int) -> None:
    _require(groups > 0 and c % groups == 0, op, f"groups={groups} does not divide C={c}")


def _variant(op: str, variant: int) -> None:
    _require(0 <= variant <= 2, op, f"variant must be 0, 1 or 2, got {variant}")


def s_forward(x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None, groups: int,
              eps: float, centered: bool) -> None:
    _input("s_forward", x)
    _groups("s_forward", groups, x.shape[1])
    _params("s_forward", x, weight=weight, bias=bias)
    _v1("s_forward", x, v1)


def s_backward(grad: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None,
               mean: Tensor, rstd: Tensor, groups: int, centered: bool, output_mask: Sequence[bool]) -> None:
    op = "s_backward"
    _input(op, x)
    _grad(op, grad, x)
    _groups(op, groups, x.shape[1])
    _params(op, x, weight=weight, bias=bias)
    _v1(op, x, v1)
    _numel(op, mean, x.shape[0] * groups, "mean")
    _numel(op, rstd, x.shape[0] * groups, "rstd")


def b_forward(x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None,
              batch_var: Tensor | None, variant: int, eps: float) -> None:
    op = "b_forward"
    _input(op, x)
    _variant(op, variant)
    _params(op, x, weight=weight, bias=bias)
    _v1(op, x, v1)
    if batch_var is not None:
        _numel(op, batch_var, x.shape[1], "batch_var")


def b_backward(grad: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None,
               mean: Tensor, q: Tensor, batch_mean: Tensor, batch_var: Tensor, variant: int, eps: float,
               batch_from_x: bool, output_mask: Sequence[bool]) -> None:
    op = "b_backward"
    _input(op, x)
    _grad(op, grad, x)
    _variant(op, variant)
    _params(op, x, weight=weight, bias=bias)
    _v1(op, x, v1)
    n, c = x.shape[:2]
    if mean.numel() != 0:  # empty: the backward takes the instance mean from x
        _numel(op, mean, n * c, "mean")
    _numel(op, q, n * c, "q")
    _numel(op, batch_var, c, "batch_var")
    if batch_from_x:
        _numel(op, batch_mean, c, "batch_mean")


def affine_forward(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> None:
    _input("affine_forward", x)
    _params("affine_forward", x, weight=weight, bias=bias)


def affine_backward(grad: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None,
                    output_mask: Sequence[bool]) -> None:
    op = "affine_backward"
    _input(op, x)
    _grad(op, grad, x)
    _params(op, x, weight=weight, bias=bias)
