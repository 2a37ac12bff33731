"""The primitives of the search space, exactly as the paper's Table 1.

Twelve element-wise ops (with Table 1's safe forms of Div, Log and Sqrt) and twelve
aggregations: mean, std and root second moment over the batch ``(b, w, h)``, the channel
``(w, h, c)``, the instance ``(w, h)`` and the group ``(w, h, c/g)`` axes. Every op keeps
the shape of its input(s), so any node can feed any other.

Batch aggregations are *stateful*: in training they use the current batch and update a
moving average, in eval they read the moving average (Table 1's blue terms). They reach
that state through an :class:`OpContext`, which the layer evaluating the graph provides.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor

from .. import statistics as stats


class OpContext(Protocol):
    """What an op may need from the layer that evaluates it."""

    eps: float
    groups: int

    def batch_statistic(self, kind: str, value: Tensor) -> Tensor:
        """Per-channel batch ``kind`` ('mean', 'var' or 'mean_square') of ``value``,
        shape (1, C, 1, 1): of the batch in training (updating its moving average),
        the moving average in eval."""


@dataclass(frozen=True)
class Primitive:
    """One op of Table 1.

    ``infix`` and ``latex`` are format strings over the operands ``{0}`` (and ``{1}``);
    ``function`` maps the operand tensors and the context to the result.
    """

    name: str
    arity: int
    function: Callable[..., Tensor]
    infix: str
    latex: str
    uses_batch_statistics: bool = False
    aggregation: bool = False


def _safe_div(a: Tensor, b: Tensor, ctx: OpContext) -> Tensor:
    return a / (b + ctx.eps * torch.sign(b))


def _safe_log(a: Tensor, ctx: OpContext) -> Tensor:
    # Table 1 writes sign(x) ln(x + eps); the magnitude inside the log is what makes it
    # defined for negative x (as in its Sqrt, sign(x) sqrt(|x|)).
    return torch.sign(a) * torch.log(a.abs() + ctx.eps)


def _signed_sqrt(a: Tensor, ctx: OpContext) -> Tensor:
    return torch.sign(a) * torch.sqrt(a.abs())


_SPATIAL = (2, 3)


def _instance_mean(a: Tensor, ctx: OpContext) -> Tensor:
    return a.mean(dim=_SPATIAL, keepdim=True)


def _channel_mean(a: Tensor, ctx: OpContext) -> Tensor:
    return stats.layer_moments(a)[0]


def _group_mean(a: Tensor, ctx: OpContext) -> Tensor:
    return stats.group_moments(a, ctx.groups)[0]


def _batch_mean(a: Tensor, ctx: OpContext) -> Tensor:
    return ctx.batch_statistic("mean", a)


def _std(variance: Callable[[Tensor, OpContext], Tensor]) -> Callable[[Tensor, OpContext], Tensor]:
    return lambda a, ctx: torch.sqrt(variance(a, ctx) + ctx.eps)


_VARIANCES = {
    "batch": lambda a, ctx: ctx.batch_statistic("var", a),
    "channel": lambda a, ctx: stats.layer_moments(a)[1],
    "instance": lambda a, ctx: stats.instance_var(a),
    "group": lambda a, ctx: stats.group_var(a, ctx.groups),
}
_MEAN_SQUARES = {
    "batch": lambda a, ctx: ctx.batch_statistic("mean_square", a),
    "channel": lambda a, ctx: a.square().mean(dim=(1, 2, 3), keepdim=True),
    "instance": lambda a, ctx: stats.instance_mean_square(a),
    "group": lambda a, ctx: stats.group_mean_square(a, ctx.groups),
}
_MEANS = {"batch": _batch_mean, "channel": _channel_mean, "instance": _instance_mean, "group": _group_mean}
# Subscripts of Table 1's mu and s^2 for each aggregation axis.
_AXES = {"batch": "b,w,h", "channel": "w,h,c", "instance": "w,h", "group": "w,h,c/g"}


def _elementwise() -> list[Primitive]:
    return [
        Primitive("add", 2, lambda a, b, ctx: a + b, "{0} + {1}", "{0} + {1}"),
        Primitive("mul", 2, lambda a, b, ctx: a * b, "{0} * {1}", "{0} {1}"),
        Primitive("div", 2, _safe_div, "{0} / {1}", r"\frac{{{0}}}{{{1}}}"),
        Primitive("max", 2, lambda a, b, ctx: torch.maximum(a, b), "max({0}, {1})", r"\max({0}, {1})"),
        Primitive("neg", 1, lambda a, ctx: -a, "-{0}", "-{0}"),
        Primitive("sigmoid", 1, lambda a, ctx: torch.sigmoid(a), "sigmoid({0})", r"\sigma({0})"),
        Primitive("tanh", 1, lambda a, ctx: torch.tanh(a), "tanh({0})", r"\tanh({0})"),
        Primitive("exp", 1, lambda a, ctx: torch.exp(a), "exp({0})", "e^{{{0}}}"),
        Primitive("log", 1, _safe_log, "log({0})", r"\mathrm{{sign}}({0}) \ln|{0}|"),
        Primitive("abs", 1, lambda a, ctx: a.abs(), "abs({0})", r"\left|{0}\right|"),
        Primitive("square", 1, lambda a, ctx: a.square(), "square({0})", r"\left({0}\right)^2"),
        Primitive("sqrt", 1, _signed_sqrt, "sqrt({0})", r"\mathrm{{sign}}({0}) \sqrt{{|{0}|}}"),
    ]


def _aggregations() -> list[Primitive]:
    ops = []
    for axis, sub in _AXES.items():
        batch = axis == "batch"
        ops += [
            Primitive(f"{axis}_mean", 1, _MEANS[axis], f"{axis}_mean({{0}})", rf"\mu_{{{{{sub}}}}}({{0}})", batch, True),
            Primitive(
                f"{axis}_std", 1, _std(_VARIANCES[axis]), f"{axis}_std({{0}})",
                rf"\sqrt{{{{s^2_{{{{{sub}}}}}({{0}})}}}}", batch, True,
            ),
            Primitive(
                f"{axis}_rms", 1, _std(_MEAN_SQUARES[axis]), f"{axis}_rms({{0}})",
                rf"\sqrt{{{{\mu_{{{{{sub}}}}}(({{0}})^2)}}}}", batch, True,
            ),
        ]
    return ops


PRIMITIVES: dict[str, Primitive] = {op.name: op for op in _elementwise() + _aggregations()}
"""Every op of Table 1 by name: element-wise first, then ``{batch,channel,instance,group}_{mean,std,rms}``
(``rms`` is the root second moment ``sqrt(mu(x^2) + eps)``)."""

MODES = ("B", "S")


def ops_for_mode(mode: str) -> tuple[str, ...]:
    """Op names allowed in a search ``mode``: ``"B"`` all of Table 1, ``"S"`` no batch-dependent op."""
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; accepted: {list(MODES)}")
    return tuple(name for name, op in PRIMITIVES.items() if mode == "B" or not op.uses_batch_statistics)
