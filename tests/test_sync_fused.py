"""Synchronized EvoNorm-B on the fused operator: 2 gloo processes equal one process with the whole batch.

With ``sync=True`` and more than one process, evonorm_core.functional.evonorm_b all-reduces
the batch moments and hands them to ``evonorm::b_forward``, whose gradient with respect to
the batch variance flows back through the all-reduce. Compared with the float64 paper
formula on the full batch (outputs, input and parameter gradients, running_var).
"""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

from evonorm_core import functional as EF

from . import paper_reference as ref
from .distributed_world import free_port

VARIANTS = ["b0", "b1", "b2"]


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _worker(rank, world, port, inputs, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, w, b, v1, grad = inputs
    for variant in VARIANTS:
        leaves = [x.chunk(world)[rank].clone(), w.chunk(world)[rank].clone(), b.clone(), v1.clone()]
        leaves = [t.requires_grad_() for t in leaves]
        running_var, tracked = torch.ones(x.shape[1], dtype=x.dtype), torch.tensor(0)
        with _CountOps() as seen:
            y = EF.evonorm_b(*leaves[:3], leaves[3] if variant == "b0" else None, running_var, tracked,
                             variant=variant, training=True, momentum=0.3, eps=1e-3, sync=True, impl="fused")
            y.backward(grad.chunk(world)[rank])
        grads = [t.grad.clone() if t.grad is not None else None for t in leaves]
        for g in grads[2:]:
            if g is not None:
                dist.all_reduce(g)  # what DDP does with shared parameter gradients
        ops = sorted({n for n in seen.names if n.startswith("evonorm.")})
        results[(variant, rank)] = (y.detach(), grads, running_var.clone(), int(tracked), ops)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def synced():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 5, 7, 6, generator=gen, dtype=torch.float64) * 2 + 0.5
    w = torch.rand(6, 5, generator=gen, dtype=torch.float64) + 0.5  # per-sample affine (class-conditional)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    v1 = torch.rand(5, generator=gen, dtype=torch.float64) + 0.5
    grad = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(2, free_port(), (x, w, b, v1, grad), results), nprocs=2, join=True)
    return (x, w, b, v1, grad), dict(results)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_sync_fused_matches_full_batch(variant, synced):
    (x, w, b, v1, grad), results = synced
    parts = [results[(variant, 0)], results[(variant, 1)]]
    assert all(p[4] == ["evonorm.b_backward.default", "evonorm.b_forward.default"] for p in parts)  # stayed fused

    leaves = [t.clone().requires_grad_() for t in (x, w, b, v1)]
    p = {"gamma": torch.ones(5, dtype=torch.float64), "beta": torch.zeros(5, dtype=torch.float64), "v1": leaves[3]}
    y = ref.reference(f"evonorm_{variant}", True)(leaves[0], p, 1e-3, training=True) * leaves[1][:, :, None, None]
    y = y + leaves[2].view(1, -1, 1, 1)
    y.backward(grad)
    torch.testing.assert_close(torch.cat([parts[0][0], parts[1][0]]), y.detach())
    torch.testing.assert_close(torch.cat([parts[0][1][0], parts[1][1][0]]), leaves[0].grad)  # dx
    torch.testing.assert_close(torch.cat([parts[0][1][1], parts[1][1][1]]), leaves[1].grad)  # per-sample dweight
    torch.testing.assert_close(parts[0][1][2], leaves[2].grad)  # dbias
    if variant == "b0":
        torch.testing.assert_close(parts[0][1][3], leaves[3].grad)  # dv1
    unbiased = x.var(dim=(0, 2, 3), unbiased=True)
    for part in parts:
        torch.testing.assert_close(part[2], 0.7 + 0.3 * unbiased)
        assert part[3] == 1
