"""The process's place in a ``torchrun`` job (a single process when not launched by one)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    """Rank, world size and device of this process.

    :meth:`from_env` reads ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``), selects ``cuda:LOCAL_RANK`` when CUDA is available (the CPU otherwise)
    and joins the process group (NCCL on GPUs, Gloo on the CPU) when there is more than
    one process.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @classmethod
    def from_env(cls) -> "DistributedContext":
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        if world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo")
        return cls(rank, world_size, local_rank, device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over all processes."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def shutdown() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
