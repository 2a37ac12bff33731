"""``sync=True`` B-series/BN layers over 2 gloo processes equal one process with the whole batch,
also when one process has an empty batch (it must still take part in the all-reduce)."""
import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import evonorm_core

from .distributed_world import free_port

SYNCED = ["evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu", "bn_swish", "rs_rej"]


SPLITS = {"even": (3, 3), "one_empty": (6, 0)}  # samples per process


def _worker(rank, world, port, x, grad_out, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    for split, sizes in SPLITS.items():
        for name in SYNCED:
            layer = evonorm_core.build_norm_act(name, x.shape[1], sync=True).double()
            shard = x.split(sizes)[rank].clone().requires_grad_()
            y = layer(shard)
            y.backward(grad_out.split(sizes)[rank])
            grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
            for g in grads.values():
                dist.all_reduce(g)  # what DDP does with parameter gradients
            results[(split, name, rank)] = (y.detach(), shard.grad, grads, layer.running_var.clone())
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def synced_results():
    torch.manual_seed(1)
    x = torch.randn(6, 4, 3, 3, dtype=torch.float64) * 2 + 0.5
    grad_out = torch.randn_like(x)
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(2, free_port(), x, grad_out, results), nprocs=2, join=True)
    return x, grad_out, dict(results)


@pytest.mark.slow
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", SYNCED)
def test_sync_matches_full_batch(name, split, synced_results):
    x, grad_out, results = synced_results
    results = [results[(split, name, 0)], results[(split, name, 1)]]

    layer = evonorm_core.build_norm_act(name, 4).double()
    full = x.clone().requires_grad_()
    y = layer(full)
    y.backward(grad_out)
    torch.testing.assert_close(torch.cat([results[0][0], results[1][0]]), y.detach())
    torch.testing.assert_close(torch.cat([results[0][1], results[1][1]]), full.grad)
    for n, p in layer.named_parameters():
        torch.testing.assert_close(results[0][2][n], p.grad)
    torch.testing.assert_close(results[0][3], layer.running_var)
    torch.testing.assert_close(results[1][3], layer.running_var)
