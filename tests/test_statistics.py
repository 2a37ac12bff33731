"""evonorm_core.statistics where the layer tests do not reach it: the synchronized batch moments, when a process
group gathers them, and the edges (planes without elements, a single value).

The synchronized path is run in this process: torch.distributed's state is replaced by a world of two, and the
differentiable all-reduce by one that adds what the other rank sends, which is found by running the same call
on the other rank's shard (so the test does not assume how the sums are laid out). The reference is the float64
moments of the whole batch (``torch.var_mean``), what one process holding every sample computes. The same
with two real gloo processes is ``test_sync_batch_stats.py``; mutation testing (``tools/mutation.py``) needs
the path run in the test's own process to see which test covers it.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

from evonorm_core import statistics as stats

from .distributed_world import GROUP, World


def two_ranks(world: World, mine: torch.Tensor, theirs: torch.Tensor, group=None):
    """``batch_moments`` of ``mine`` synchronized with a rank that holds ``theirs``."""
    world.other = None
    stats.batch_moments(theirs, sync=True, process_group=group)  # what the other rank sends
    world.other = world.sent.pop()[0]
    return stats.batch_moments(mine, sync=True, process_group=group)


def batch(n: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # variances well below 1 and a mean away from 0 (a clamp at 1 or a dropped mean would show); N != C != H != W
    return (torch.randn(n, 4, 2, 5, generator=generator, dtype=torch.float64) * 0.5 + 0.3).requires_grad_()


@pytest.mark.parametrize("sizes", [(3, 3), (2, 5), (0, 4), (4, 0)])
def test_synchronized_moments_are_those_of_the_whole_batch(monkeypatch, sizes):
    world = World(monkeypatch)
    mine, theirs = batch(sizes[0], 1), batch(sizes[1], 2)
    mean, var, count = two_ranks(world, mine, theirs)
    whole = torch.cat([mine, theirs]).detach()
    ref_var, ref_mean = torch.var_mean(whole, dim=(0, 2, 3), unbiased=False)
    torch.testing.assert_close(mean, ref_mean)
    torch.testing.assert_close(var, ref_var)
    assert type(count) is int and count == (sizes[0] + sizes[1]) * 2 * 5
    assert [group for _, group in world.sent] == [dist.group.WORLD]  # no group given: the default one
    if sizes[0]:  # the gradient reaches this rank's inputs as it would through the whole batch
        weights = torch.linspace(-1, 2, 8, dtype=torch.float64)
        (mean * weights[:4] + var * weights[4:]).sum().backward()
        full = torch.cat([mine.detach(), theirs.detach()]).requires_grad_()
        ref_var, ref_mean = torch.var_mean(full, dim=(0, 2, 3), unbiased=False)
        (ref_mean * weights[:4] + ref_var * weights[4:]).sum().backward()
        torch.testing.assert_close(mine.grad, full.grad[:sizes[0]])


def test_synchronized_moments_go_through_the_given_group(monkeypatch):
    world = World(monkeypatch, size=1, sizes={GROUP: 2})  # the default world alone, the given group of two
    mean, var, count = two_ranks(world, batch(3, 1), batch(2, 2), group=GROUP)
    assert [group for _, group in world.sent] == [GROUP] and count == 5 * 10
    world.sent.clear()
    stats.batch_moments(batch(3, 1), sync=True)  # the default group has one process: nothing to gather
    assert world.sent == []


@pytest.mark.parametrize("sync,available,initialized,size,expected", [
    (True, True, True, 2, True),
    (False, True, True, 2, False),
    (True, False, True, 2, False),
    (True, True, False, 2, False),
    (True, True, True, 1, False),
    (True, True, True, 3, True),
])
def test_synchronization_needs_sync_an_initialized_group_and_another_process(
        monkeypatch, sync, available, initialized, size, expected):
    World(monkeypatch, size=size, initialized=initialized, available=available)
    assert stats.syncs_across_processes(sync) is expected
    assert stats.syncs_across_processes(sync, GROUP) is expected


def test_batch_moments_are_local_unless_asked_to_synchronize(monkeypatch):
    world = World(monkeypatch)
    x = batch(3, 1).detach()
    mean, var, count = stats.batch_moments(x)
    ref_var, ref_mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    assert world.sent == [] and type(count) is int and count == 30
    torch.testing.assert_close((mean, var), (ref_mean, ref_var))


def test_planes_without_elements_give_nan_statistics_of_the_usual_shape_without_a_warning():
    x = torch.randn(2, 4, 0, 3, dtype=torch.float64)  # 0 x 3 planes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cases = {
            "instance_var": (stats.instance_var(x), (2, 4, 1, 1)),
            "group_var": (stats.group_var(x, 2), (2, 4, 1, 1)),
            "group mean": (stats.group_moments(x, 2)[0], (2, 4, 1, 1)),
            "layer mean": (stats.layer_moments(x)[0], (2, 1, 1, 1)),
            "layer var": (stats.layer_moments(x)[1], (2, 1, 1, 1)),
        }
    for name, (value, shape) in cases.items():
        assert value.shape == shape and value.dtype == torch.float64 and value.isnan().all(), name


def test_a_single_value_has_itself_as_mean_and_no_variance():
    x = torch.full((1, 1, 1, 1), 2.5, dtype=torch.float64)
    assert stats.instance_var(x).item() == 0.0
    mean, var = stats.layer_moments(x)
    assert (mean.item(), var.item()) == (2.5, 0.0)
    mean, var = stats.group_moments(x, 1)
    assert (mean.item(), var.item()) == (2.5, 0.0)
