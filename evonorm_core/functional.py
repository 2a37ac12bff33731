r"""The suite's normalization layers as functions: what :mod:`evonorm_core.layers` calls
(as ``torch.nn.functional`` is to ``torch.nn``); the layers hold the state.

Every EvoNorm layer calls :func:`evonorm_s` or :func:`evonorm_b` (Liu et al., "Evolving
Normalization-Activation Layers", Tables 2 and 3; :func:`affine` without the nonlinearity);
``gamma`` is ``weight`` and ``beta`` is ``bias``:

.. math::
    \text{S0: } \frac{x\,\sigma(v_1 x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}}\gamma + \beta \qquad
    \text{S1: } \frac{x\,\sigma(x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}}\gamma + \beta \qquad
    \text{S2: } \frac{x\,\sigma(x)}{\sqrt{\mu_{w,h,c/g}(x^2) + \epsilon}}\gamma + \beta

.. math::
    \text{B: } \frac{x}{\max(\sqrt{s^2_{b,w,h}(x) + \epsilon},\ u(x))}\gamma + \beta, \quad
    u = v_1 x + \sqrt{s^2_{w,h}(x) + \epsilon} \text{ (B0)},\
    (x + 1)\sqrt{\mu_{w,h}(x^2) + \epsilon} \text{ (B1)},\
    \sqrt{\mu_{w,h}(x^2) + \epsilon} - x \text{ (B2)}

``weight`` and ``bias`` are ``None`` (1 and 0), per channel ``(C,)`` or per sample ``(N, C)``
(class-conditional layers). Statistics are computed in float32 (float64 stays float64) and
the result has the input's dtype.

``impl="reference"`` evaluates the formula as composed PyTorch ops (:mod:`evonorm_core.formulas`,
twice differentiable; what ONNX export and the fused path's double backward use too).
``impl="fused"`` runs the fused kernels of :mod:`evonorm_core.ops` (a hand-derived backward
that keeps only the input and small statistics).

B series: in training (or when ``running_var`` is None) the batch variance is used and,
with ``running_var`` given, ``num_batches_tracked`` is incremented and ``running_var``
updated in place by :func:`evonorm_core.running_stats.update_running_` (unbiased, as
``nn.BatchNorm2d``); in eval ``running_var`` is used and gets no gradient.

Empty inputs (N = 0 or H W = 0) give an empty output tied to every parameter (zero
gradients) and leave the moving averages untouched, except in synchronized training,
where the process still takes part in the all-reduce and the others' batch is counted.

The baselines' normalizations (before their activation) run on PyTorch's kernels with
per-sample ``gamma``/``beta`` too: :func:`batch_norm` (BN; its moments, and the moving
averages of the "RS + rej" layer, from :func:`tracked_batch_moments`) and :func:`group_norm`
(GN; LayerNorm is one group). They take and return ``x`` in its compute dtype.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ops, running_stats
from . import statistics as stats
from .formulas import B_VARIANTS, apply_affine, b_transform, has_shape, is_affine_shape, s_transform, upcast

IMPLS = ("fused", "reference")

__all__ = ["B_VARIANTS", "IMPLS", "affine", "batch_norm", "evonorm_b", "evonorm_s", "group_norm",
           "tracked_batch_moments"]

# torch.fx.symbolic_trace (and create_feature_extractor) records calls of these as single
# nodes when made through this module's namespace (``functional.evonorm_s(...)``, the layers'
# ``functional._evonorm_s(...)``), so the argument checks and dispatch inside never see a traced value.
for _name in ("affine", "_affine", "evonorm_s", "_evonorm_s", "evonorm_b", "_evonorm_b", "tracked_batch_moments",
              "batch_norm", "group_norm"):
    torch.fx.wrap(_name)


# ---- argument checks (the layers' too) ----------------------------------------------------

def check_positive(name: str, value: float, *, integer: bool = False) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``value`` is a finite positive (int) number."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a {'positive int' if integer else 'finite positive number'}, got {value!r}")


def check_nchw(fn: str, x: Tensor) -> None:
    """Raise a ``ValueError`` naming ``fn`` unless ``x`` is a real floating-point NCHW tensor."""
    if not isinstance(x, Tensor) or x.dim() != 4:
        got = f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{fn} expects an NCHW tensor (4 dims), got {got}")
    if not x.is_floating_point():
        raise ValueError(
            f"{fn} expects a real floating-point input (float16, bfloat16, float32 or float64), got dtype {x.dtype}"
        )


def check_affine(fn: str, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> None:
    """Raise a ``ValueError`` naming ``fn`` unless ``weight`` and ``bias`` are each None, per
    channel (C,) or per sample (N, C) for the NCHW input ``x``."""
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and not is_affine_shape(t, x):
            n, c = x.shape[:2]
            raise ValueError(f"{fn}: {name} must be None, ({c},) or per sample ({n}, {c}) for input of shape "
                             f"{tuple(x.shape)}, got shape {tuple(t.shape)}")


def check_devices(fn: str, x: Tensor, **tensors: Tensor | None) -> None:
    """Raise a ``ValueError`` naming ``fn`` unless each given tensor is on ``x``'s device (the
    fused operators dispatch on ``x`` alone and would read another device's memory)."""
    device = x.device
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{fn}: {name} is on {t.device} but the input is on {device}; "
                             f"move the layer to the input's device (layer.to({str(device)!r}))")


def check_impl(name: str, impl: str) -> str:
    """``impl`` itself if it is one of :data:`IMPLS`, else a ``ValueError`` naming ``name``."""
    if impl not in IMPLS:
        raise ValueError(f"{name} must be one of {list(IMPLS)}, got {impl!r}")
    return impl


def _check_input(fn: str, x: Tensor, eps: float, impl: str) -> None:
    check_nchw(fn, x)
    check_positive(f"{fn}: eps", eps)
    check_impl(f"{fn}: impl", impl)


def _per_sample(weight: Tensor | None, bias: Tensor | None) -> bool:
    return any(t is not None and t.dim() == 2 for t in (weight, bias))


# ---- the EvoNorm layers (affine: without their nonlinearity) ------------------------------

def _batch_norm_takes(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> bool:
    """Whether ``F.batch_norm`` accepts ``x`` with these per-channel parameters: all in one
    dtype, or float32 parameters for a float16/bfloat16 input."""
    dtypes = {t.dtype for t in (weight, bias) if t is not None}
    return dtypes == {x.dtype} or (dtypes == {torch.float32} and x.dtype in (torch.float16, torch.bfloat16))


# torch <= 2.11 refuses eps=0 even in eval; 1 + 1e-20 rounds to 1 in float32 and float64, so
# the batch norm below still divides by exactly sqrt(1)
_UNIT_VARIANCE_EPS = 1e-20


def affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, *, impl: str = "fused") -> Tensor:
    """``x * weight + bias`` per channel or per sample (an EvoNorm with ``nonlinearity=False``), in ``x``'s dtype.

    Per-channel ``(C,)`` weight and bias in a dtype ``F.batch_norm`` takes with ``x`` make an inference-mode
    batch norm with mean 0, variance 1 and no eps (1 + 1e-20 == 1): one kernel each way, which Inductor fuses with
    its neighbours under capture. With ``impl="fused"``, eager code on the CPU with the C++ kernels runs the
    ``affine_forward`` operator instead (one pass each way: its backward reads the gradient and ``x`` once for
    ``dx``, ``dweight`` and ``dbias``; since its autograd node is C++ it takes 0.81-0.93x the batch norm's fwd+bwd
    down to MobileNetV2's batch-4 4x4 planes: docs/benchmarks.md, "The eager layers' autograd nodes in C++"),
    also for parameters ``F.batch_norm`` does not take (per sample, another dtype).
    Elsewhere composed ops in ``x``'s compute dtype.
    """
    check_affine("affine", x, weight, bias)
    check_impl("affine: impl", impl)
    return _affine(x, weight, bias, impl)


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, impl: str, caller: str = "affine") -> Tensor:
    """:func:`affine` on arguments of valid shapes and values (a layer's own, its input checked): the device check
    (the fused operators dispatch on ``x`` alone) and the computation, with errors naming ``caller``."""
    check_devices(caller, x, weight=weight, bias=bias)
    if weight is None and bias is None:
        return x
    if impl == "fused" and x.dim() == 4 and x.numel() > 0 and _eager_on_cpu_kernels(x):
        op = ops.library.affine_forward_eager if torch.is_grad_enabled() else ops.library.affine_forward_no_grad
        return op(x, weight, bias)
    if not _per_sample(weight, bias) and _batch_norm_takes(x, weight, bias):
        c = x.shape[1]
        like = weight if weight is not None else bias
        zeros = torch.zeros(c, dtype=like.dtype, device=like.device)
        ones = torch.ones(c, dtype=like.dtype, device=like.device)
        return F.batch_norm(x, zeros, ones, weight, bias, training=False, momentum=0.0, eps=_UNIT_VARIANCE_EPS)
    return apply_affine(upcast(x), weight, bias).to(x.dtype)


def evonorm_s(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    v1: Tensor | None,
    *,
    groups: int,
    eps: float,
    centered: bool = True,
    impl: str = "fused",
) -> Tensor:
    """EvoNorm-S0 (``v1`` given), S1 (``v1=None``) or S2 (``v1=None, centered=False``).

    ``x`` is NCHW; ``groups`` must divide its channels; ``v1`` is ``None`` or ``(C,)``.
    """
    _check_input("evonorm_s", x, eps, impl)
    c = x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0 or c % groups:
        raise ValueError(f"evonorm_s: groups must be a positive int dividing the {c} channels, got {groups!r}")
    check_affine("evonorm_s", x, weight, bias)
    if v1 is not None and not has_shape(v1, c):
        raise ValueError(f"evonorm_s: v1 must be None or ({c},), got shape {tuple(v1.shape)}")
    return _evonorm_s(x, weight, bias, v1, groups, eps, centered, impl)


def _evonorm_s(x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None, groups: int, eps: float,
               centered: bool, impl: str, caller: str = "evonorm_s") -> Tensor:
    """:func:`evonorm_s` on arguments of valid shapes and values (a layer's own, its input checked): the device
    check and the computation, with errors naming ``caller``."""
    check_devices(caller, x, weight=weight, bias=bias, v1=v1)
    if x.numel() == 0:
        return _empty_result(x, weight, bias, v1)
    op = _fused_forward(x, "s_forward") if impl == "fused" else None
    if op is not None:
        return op(x, weight, bias, v1, groups, float(eps), bool(centered))[0]
    z = s_transform(upcast(x), v1, groups, eps, centered)
    return apply_affine(z, weight, bias).to(x.dtype)


def _empty_result(x: Tensor, weight: Tensor | None, bias: Tensor | None, *tied: Tensor | None) -> Tensor:
    """The (empty) output for an empty input, tied to every parameter (zero gradients, as DDP
    expects every parameter to get one) and to ``tied`` (e.g. an all-reduced statistic)."""
    tie = sum((t.sum() * 0 for t in (weight, bias, *tied) if t is not None), x.new_zeros((), dtype=torch.float32))
    return apply_affine(upcast(x), weight, bias).to(x.dtype) + tie.to(x.dtype)


def _update_running(
    running_var: Tensor,
    num_batches_tracked: Tensor | None,
    batch_var: Tensor,
    count: int,
    momentum: float | None,
    running_mean: Tensor | None = None,
    batch_mean: Tensor | None = None,
) -> None:
    """Count the batch and fold its (biased) variance into ``running_var`` (stored unbiased)
    and, with ``running_mean``, its mean into ``running_mean``."""
    factor = running_stats.count_batch_(num_batches_tracked, momentum)
    running_stats.update_running_(running_var, batch_var, factor, count)
    if running_mean is not None:
        running_stats.update_running_(running_mean, batch_mean, factor)


def evonorm_b(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    v1: Tensor | None,
    running_var: Tensor | None,
    num_batches_tracked: Tensor | None,
    *,
    variant: str,
    training: bool,
    momentum: float | None,
    eps: float,
    sync: bool = False,
    process_group: object | None = None,
    impl: str = "fused",
) -> Tensor:
    """EvoNorm-B0/B1/B2 (``variant`` in :data:`B_VARIANTS`; ``v1`` (C,) only for B0).

    Batch statistics are used when ``training`` or ``running_var`` is None; with ``sync`` and
    an initialised process group of more than one process they are those of the whole
    batch across processes (as ``SyncBatchNorm``). In training with ``running_var`` given,
    ``num_batches_tracked`` (if given) is incremented and ``running_var`` updated in place
    (``momentum``, or a cumulative average for ``momentum=None``).
    """
    _check_input("evonorm_b", x, eps, impl)
    c = x.shape[1]
    if variant not in B_VARIANTS:
        raise ValueError(f"evonorm_b: unknown variant {variant!r}; accepted: {list(B_VARIANTS)}")
    if variant == "b0" and (v1 is None or not has_shape(v1, c)):
        raise ValueError(f"evonorm_b: variant 'b0' needs v1 of shape ({c},), got "
                         f"{None if v1 is None else tuple(v1.shape)}")
    check_affine("evonorm_b", x, weight, bias)
    if running_var is not None and not has_shape(running_var, c):
        raise ValueError(f"evonorm_b: running_var must have shape ({c},), got {tuple(running_var.shape)}")
    return _evonorm_b(x, weight, bias, v1, running_var, num_batches_tracked, variant, training, momentum, eps, sync,
                      process_group, impl)


def _evonorm_b(x: Tensor, weight: Tensor | None, bias: Tensor | None, v1: Tensor | None, running_var: Tensor | None,
               num_batches_tracked: Tensor | None, variant: str, training: bool, momentum: float | None, eps: float,
               sync: bool, process_group: object | None, impl: str, caller: str = "evonorm_b") -> Tensor:
    """:func:`evonorm_b` on arguments of valid shapes and values (a layer's own, its input checked): the device
    check and the computation, with errors naming ``caller``."""
    check_devices(caller, x, weight=weight, bias=bias, v1=v1, running_var=running_var,
                  num_batches_tracked=num_batches_tracked)
    use_batch = training or running_var is None
    update = training and running_var is not None
    synced = use_batch and stats.syncs_across_processes(sync, process_group)
    count = x.numel() // x.shape[1]
    if torch.jit.is_tracing():  # traced sizes are tensors; count / (count - 1) would round to float32
        count = int(count)
    if count == 0:  # N H W == 0
        # empty: moving averages untouched, unless synchronized, where this process still takes
        # part in the all-reduce (forward and backward) and the other processes' batch counts
        if not synced:
            return _empty_result(x, weight, bias, v1)
        _, batch_var, count = stats.batch_moments(upcast(x), sync, process_group)
        if update and count > 0:
            _update_running(running_var, num_batches_tracked, batch_var, count, momentum)
        return _empty_result(x, weight, bias, v1, batch_var)
    op = _fused_forward(x, "b_forward") if impl == "fused" else None
    if op is not None:
        index = B_VARIANTS.index(variant)
        if not use_batch:
            return op(x, weight, bias, v1, running_var, index, float(eps))[0]
        if not synced:
            y, _, _, _, batch_var = op(x, weight, bias, v1, None, index, float(eps))
        else:  # the operator takes the all-reduced variance; its gradient flows back through the all-reduce
            _, batch_var, count = stats.batch_moments(upcast(x), sync, process_group)
            y = op(x, weight, bias, v1, batch_var, index, float(eps))[0]
        if update:
            _update_running(running_var, num_batches_tracked, batch_var, count, momentum)
        return y
    xc = upcast(x)
    if use_batch:
        _, batch_var, count = stats.batch_moments(xc, sync, process_group)
        if update:
            _update_running(running_var, num_batches_tracked, batch_var, count, momentum)
    else:
        batch_var = running_var
    return apply_affine(b_transform(xc, v1, batch_var, variant, eps), weight, bias).to(x.dtype)


# ---- the baselines' normalizations (BatchNorm, GroupNorm, LayerNorm) ----------------------

def tracked_batch_moments(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor,
    num_batches_tracked: Tensor,
    training: bool,
    momentum: float | None,
    sync: bool = False,
    process_group: object | None = None,
) -> tuple[Tensor | None, Tensor]:
    """Per-channel ``(mean, var)`` of shape (C,) in ``x``'s dtype, ``mean`` None without ``running_mean``.

    Training: the (biased) moments of the batch (across processes with ``sync``), folded into
    the moving averages by :mod:`evonorm_core.running_stats` unless the batch is empty.
    Eval: the moving averages.
    """
    if not training:
        mean = None if running_mean is None else running_mean.to(x.dtype)
        return mean, running_var.to(x.dtype)
    mean, var, count = stats.batch_moments(x, sync, process_group)
    if count > 0:
        _update_running(running_var, num_batches_tracked, var, count, momentum, running_mean, mean)
    return (mean if running_mean is not None else None), var


def batch_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor,
    running_var: Tensor,
    num_batches_tracked: Tensor,
    training: bool,
    momentum: float | None,
    eps: float,
    sync: bool = False,
    process_group: object | None = None,
) -> Tensor:
    """``(x - mu_{b,w,h}) / sqrt(s^2_{b,w,h} + eps) * weight + bias``, ``x`` in its compute dtype.

    In training the batch's moments are used and folded into ``running_mean``/``running_var``
    with the weight :func:`evonorm_core.running_stats.count_batch_` gives; an empty batch
    changes nothing. Runs on ``F.batch_norm`` (whose update is then ``nn.BatchNorm2d``'s
    rule with that weight), except for statistics synchronised across processes, buffers in
    another dtype than ``x`` or one value per channel: composed ops with
    :func:`tracked_batch_moments`.
    ``weight``/``bias``: None, (C,) or per sample (N, C).
    """
    synced = training and stats.syncs_across_processes(sync, process_group)
    if x.numel() == 0 and not synced:
        return apply_affine(x, weight, bias)
    if synced or running_var.dtype != x.dtype or (training and x.numel() <= x.shape[1]):
        # (one value per channel: F.batch_norm refuses it and its unbiased variance would be 0/0)
        mean, var = tracked_batch_moments(
            x, running_mean, running_var, num_batches_tracked, training, momentum, sync, process_group
        )
        z = (x - mean.view(1, -1, 1, 1)) / torch.sqrt(var.view(1, -1, 1, 1) + eps)
        return apply_affine(z, weight, bias)
    per_sample = _per_sample(weight, bias)
    factor = running_stats.count_batch_(num_batches_tracked, momentum) if training else 0.0
    y = F.batch_norm(
        x, running_mean, running_var,
        None if per_sample or weight is None else weight.to(x.dtype),
        None if per_sample or bias is None else bias.to(x.dtype),
        training=training, momentum=factor, eps=eps,
    )
    return apply_affine(y, weight, bias) if per_sample else y


def group_norm(x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """``(x - mu_{w,h,c/g}) / sqrt(s^2_{w,h,c/g} + eps) * weight + bias`` on ``F.group_norm``
    (LayerNorm over channels and pixels: ``groups=1``), ``x`` in its compute dtype.

    ``weight``/``bias``: None, (C,) or per sample (N, C); an empty input gives an empty output.
    """
    if x.numel() == 0:
        return apply_affine(x, weight, bias)
    if x.numel() == groups:  # one sample, one value per group: x - mu is 0 (F.group_norm refuses it)
        return apply_affine(x - x, weight, bias)
    if _per_sample(weight, bias):
        return apply_affine(F.group_norm(x, groups, None, None, eps), weight, bias)
    weight = None if weight is None else weight.to(x.dtype)
    bias = None if bias is None else bias.to(x.dtype)
    return F.group_norm(x, groups, weight, bias, eps)


# ---- choosing the fused path --------------------------------------------------------------

# Under torch.compile (Inductor), per device type: the smallest input (in elements) for
# which the registered operator runs (an opaque call of its kernel in the compiled graph).
# Smaller inputs, and devices not listed (CUDA), run the composed formula, which Inductor
# fuses into its own kernels (C++ on the CPU, Triton on CUDA). Measured on the CPU
# (docs/benchmarks.md, "Compiled: operator or formula"; 2026-11-27): the operator's fwd+bwd
# takes 0.2-0.6x the compiled formula's from 16x64x14x14 (200K elements) up to the ResNet-50
# stages and 0.65-0.96x at 32K-61K; the two are even at 4x64x8x8 (16K) and the formula is
# faster below, 0.9x the operator's at 4K and 0.5x at 512, where the call overhead counts.
COMPILED_OPERATOR_MIN_NUMEL = {"cpu": 16384}


def _eager_on_cpu_kernels(x: Tensor) -> bool:
    """Whether this call runs eagerly (no program capture) on the CPU with the C++ kernels loaded."""
    if x.device.type != "cpu" or torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing():
        return False
    return ops.load("cpu")


def _fused_forward(x: Tensor, name: str) -> Callable[..., tuple[Tensor, ...]] | None:
    """What ``impl="fused"`` runs for ``x`` here: the forward operator ``name`` of
    ``torch.ops.evonorm``, or None for the composed formula.

    Eager: the operator through its eager entry points, ``ops.library.<name>_eager`` with
    gradients (the same autograd at less cost per call) and ``<name>_no_grad`` without (past the
    operator's autograd kernel, which has nothing to do then). Program capture
    calls the registered operator itself: ``torch.export`` and ``torch.jit.trace`` always (one
    node per layer), ``torch.compile`` per :data:`COMPILED_OPERATOR_MIN_NUMEL`; ONNX export
    takes the formula (plain ONNX ops).
    """
    compiling, exporting = torch.compiler.is_compiling(), torch.compiler.is_exporting()
    # under capture, load() is folded to its result at trace time; is_loaded() would be
    # guarded on a set that load() itself changes (Dynamo then fails its own guard)
    if compiling or exporting or not ops.is_loaded(x.device.type):
        ops.load(x.device.type)
    if not (compiling or exporting or torch.jit.is_tracing()):
        return getattr(ops.library, f"{name}_eager" if torch.is_grad_enabled() else f"{name}_no_grad")
    if torch.onnx.is_in_onnx_export():
        return None
    if compiling and not exporting:
        smallest = COMPILED_OPERATOR_MIN_NUMEL.get(x.device.type)
        if smallest is None or x.numel() < smallest:
            return None
    return getattr(torch.ops.evonorm, name)
