"""Aggregation statistics over NCHW tensors, named as in the paper's Table 1.

Every function returns a tensor that broadcasts against ``x``: batch statistics have shape
``(1, C, 1, 1)``, instance and group statistics ``(N, C, 1, 1)`` (a group's statistic is
repeated for each of its channels), channel (layer) and pixel statistics ``(N, 1, 1, 1)``
and ``(N, 1, H, W)``. Variances are the biased (population) variances the paper's
``s^2`` denotes. Inputs are expected in float32 or float64; callers upcast half precision.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

DEFAULT_GROUPS = 32

_SPATIAL = (2, 3)

# torch.fx.symbolic_trace records a call of these (through this module, ``stats.group_var(x)``)
# as one node, so layers composed of them trace although they read shapes.
_TRACED_AS_CALLS = (
    "instance_var", "instance_mean_square", "group_moments", "group_var", "group_mean_square",
    "layer_moments", "pixel_mean_square", "batch_moments",
)


def resolve_groups(num_channels: int, groups: int | None) -> int:
    """Number of groups used for ``num_channels`` channels.

    ``groups=None`` means the paper's default of 32, lowered until it divides
    ``num_channels`` (what the TensorFlow reference does), so any width works. An explicit
    ``groups`` must divide ``num_channels``; otherwise a ``ValueError`` says which do.
    """
    if groups is None:
        groups = min(DEFAULT_GROUPS, num_channels)
        while num_channels % groups:
            groups -= 1
        return groups
    if not isinstance(groups, int) or groups <= 0:
        raise ValueError(f"groups must be a positive int or None, got {groups!r}")
    if num_channels % groups:
        divisors = [g for g in range(1, num_channels + 1) if num_channels % g == 0]
        raise ValueError(
            f"num_channels={num_channels} is not divisible by groups={groups}; "
            f"use one of {divisors} or groups=None (32, lowered until it divides)"
        )
    return groups


def _var_mean(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """``torch.var_mean`` (biased); NaN, without PyTorch's warning, where there is nothing to reduce,
    still computed from ``x`` so that a gradient of an empty input exists."""
    if x.numel() == 0:  # mean() of nothing is NaN without the warning var_mean gives
        mean = x.mean(dim=dim, keepdim=True)
        var = (x - mean).square().mean(dim=dim, keepdim=keepdim)
        return var, mean if keepdim else mean.squeeze(dim)
    return torch.var_mean(x, dim=dim, unbiased=False, keepdim=keepdim)


def instance_var(x: Tensor) -> Tensor:
    """``s^2_{w,h}(x)``: variance over each sample's channel plane, shape (N, C, 1, 1)."""
    return _var_mean(x, _SPATIAL, keepdim=True)[0]


def instance_mean_square(x: Tensor) -> Tensor:
    """``mu_{w,h}(x^2)``, shape (N, C, 1, 1)."""
    return x.square().mean(dim=_SPATIAL, keepdim=True)


def _per_group(stat: Tensor, num_channels: int) -> Tensor:
    n, groups = stat.shape[:2]
    return stat.view(n, groups, 1).expand(n, groups, num_channels // groups).reshape(n, num_channels, 1, 1)


def _grouped(x: Tensor, groups: int) -> Tensor:
    """``x`` viewed as (N, groups, C/groups * H * W) (explicit sizes, so empty tensors work too)."""
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups * h * w)


def group_moments(x: Tensor, groups: int) -> tuple[Tensor, Tensor]:
    """``(mu_{w,h,c/g}(x), s^2_{w,h,c/g}(x))``, each of shape (N, C, 1, 1)."""
    n, c = x.shape[:2]
    var, mean = _var_mean(_grouped(x, groups), 2)
    return _per_group(mean, c), _per_group(var, c)


def group_var(x: Tensor, groups: int) -> Tensor:
    """``s^2_{w,h,c/g}(x)``: variance over each group of C/groups channels, shape (N, C, 1, 1)."""
    return group_moments(x, groups)[1]


def group_mean_square(x: Tensor, groups: int) -> Tensor:
    """``mu_{w,h,c/g}(x^2)``, shape (N, C, 1, 1)."""
    n, c = x.shape[:2]
    return _per_group(_grouped(x, groups).square().mean(dim=2), c)


def layer_moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(mu_{w,h,c}(x), s^2_{w,h,c}(x))``: over all of a sample's elements, shape (N, 1, 1, 1)."""
    var, mean = _var_mean(x, (1, 2, 3), keepdim=True)
    return mean, var


def pixel_mean_square(x: Tensor) -> Tensor:
    """``mu_c(x^2)``: mean square across channels at each pixel (PixelNorm), shape (N, 1, H, W)."""
    return x.square().mean(dim=1, keepdim=True)


def syncs_across_processes(sync: bool, process_group: object | None = None) -> bool:
    """Whether ``sync`` gathers batch statistics over more than one process right now."""
    return bool(sync) and dist.is_available() and dist.is_initialized() and dist.get_world_size(process_group) > 1


def batch_moments(
    x: Tensor, sync: bool = False, process_group: object | None = None
) -> tuple[Tensor, Tensor, int]:
    """``(mu_{b,w,h}(x), s^2_{b,w,h}(x), n)``: per-channel moments of shape (C,), and the
    number of elements ``n`` each channel's moments were taken over (0: an empty batch,
    whose moments are NaN).

    With ``sync`` and an initialised process group of more than one process, the moments
    are those of the batch gathered over all processes (as ``SyncBatchNorm``), computed
    with a differentiable all-reduce so gradients flow to every process's inputs.
    """
    c = x.shape[1]
    count = x.numel() // c
    if syncs_across_processes(sync, process_group):
        # imported here: it raises ImportError in torch builds without distributed support
        # (USE_DISTRIBUTED=0), and a synced call only gets here with a process group initialised
        from torch.distributed.nn.functional import all_reduce

        sums = torch.cat([x.new_full((1,), count), x.sum(dim=(0, 2, 3)), x.square().sum(dim=(0, 2, 3))])
        sums = all_reduce(sums, group=process_group or dist.group.WORLD)
        total = sums[0]
        mean, mean_square = sums[1:1 + c] / total, sums[1 + c:] / total
        return mean, (mean_square - mean.square()).clamp_min(0), int(total.item())  # an empty local batch takes part
    if count == 0:
        nan = x.new_full((c,), float("nan"))
        return nan, nan, 0
    var, mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    return mean, var, count


for _name in _TRACED_AS_CALLS:
    torch.fx.wrap(_name)
