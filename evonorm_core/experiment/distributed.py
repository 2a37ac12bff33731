"""The process's place in a ``torchrun`` job (a single process when not launched by one).

The environment is checked before anything waits: ``WORLD_SIZE`` > 1 needs ``RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` too (torchrun sets them all), a ``RANK`` needs a
``WORLD_SIZE`` above it, and every value must be a number in range; anything else is a
:class:`DistributedSetupError` naming the variables. Outside torchrun, a rank other than 0
waits at most ``EVONORM_RENDEZVOUS_SECONDS`` (default 120) for rank 0 to answer at
``MASTER_ADDR:MASTER_PORT`` and then stops with an error, and rank 0 says whom it waits for.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import ConfigError

VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
NEEDED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
RENDEZVOUS_SECONDS = 120.0
LAUNCH = ("launch every process with torchrun (torchrun --nproc_per_node N PROGRAM ...), or unset "
          f"{', '.join(VARIABLES)} to run one process")


class DistributedSetupError(ConfigError):
    """The distributed environment is incomplete or inconsistent; the message names the variables."""


def environment_ranks(env: dict[str, str] | None = None) -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun's variables in ``env`` (default ``os.environ``),
    checked before anything waits (see the module docstring)."""
    env = os.environ if env is None else env
    given = {name: env[name] for name in VARIABLES if env.get(name, "") != ""}
    world_size = _number(given, "WORLD_SIZE", 1, 1)
    rank = _number(given, "RANK", 0, 0)
    local_rank = _number(given, "LOCAL_RANK", 0, 0)
    if world_size == 1:
        if rank != 0:
            where = f"WORLD_SIZE={given['WORLD_SIZE']}" if "WORLD_SIZE" in given else "WORLD_SIZE is not set"
            raise DistributedSetupError(f"RANK={given['RANK']} is set but {where}: a rank needs a WORLD_SIZE above "
                                        f"it; {LAUNCH}")
        return 0, 1, local_rank
    missing = [name for name in NEEDED if name not in given]
    if missing:
        have = ", ".join(f"{name}={value}" for name, value in given.items())
        raise DistributedSetupError(f"a distributed environment is half set ({have}; {', '.join(missing)} not set): "
                                    f"a job of WORLD_SIZE > 1 needs all of {', '.join(NEEDED)}; {LAUNCH}")
    if rank >= world_size:
        raise DistributedSetupError(f"RANK={rank} is not below WORLD_SIZE={world_size}; {LAUNCH}")
    port = _number(given, "MASTER_PORT", 0, 1)
    if port > 65535:
        raise DistributedSetupError(f"MASTER_PORT={port} is not a port (1..65535); {LAUNCH}")
    return rank, world_size, local_rank


def _number(given: dict[str, str], name: str, default: int, least: int) -> int:
    if name not in given:
        return default
    try:
        value = int(given[name])
    except ValueError:
        value = None
    if value is None or value < least:
        raise DistributedSetupError(f"{name}={given[name]!r} is not an integer >= {least}; {LAUNCH}")
    return value


def wait_for_rendezvous(rank: int, world_size: int, env: dict[str, str] | None = None) -> None:
    """Outside torchrun: rank 0 says whom it waits for; another rank waits a bounded time for rank 0 to
    answer at ``MASTER_ADDR:MASTER_PORT`` (:class:`DistributedSetupError` after that)."""
    env = os.environ if env is None else env
    if env.get("TORCHELASTIC_RUN_ID"):  # torchrun: its agent's store is up before any process starts
        return
    address, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    if rank == 0:
        print(f"rank 0 of {world_size}: waiting for the other {world_size - 1} processes at {address}:{port}",
              file=sys.stderr, flush=True)
        return
    seconds = float(env.get("EVONORM_RENDEZVOUS_SECONDS", RENDEZVOUS_SECONDS))
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((address, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))).close()
            return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise DistributedSetupError(
                    f"rank {rank} of {world_size}: nothing answered at MASTER_ADDR:MASTER_PORT={address}:{port} "
                    f"within {seconds:g} s ({error.strerror or error}); rank 0 did not start there or the address "
                    f"is wrong: {LAUNCH}") from None
        time.sleep(0.5)


def training_device(local_rank: int = 0) -> torch.device:
    """The device a training process uses: ``cuda:local_rank`` when CUDA is available, else the CPU."""
    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def describe_device(device: torch.device) -> str:
    """What a run trained on, for its result file: ``"cpu"``, or the GPU's name."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


@dataclass(frozen=True)
class DistributedContext:
    """Rank, world size and device of this process.

    :meth:`from_env` reads ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``), selects ``cuda:LOCAL_RANK`` when CUDA is available (the CPU otherwise)
    and joins the process group (NCCL on GPUs, Gloo on the CPU) when there is more than
    one process. The variables are checked first (:func:`environment_ranks`).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @classmethod
    def from_env(cls) -> "DistributedContext":
        rank, world_size, local_rank = environment_ranks()
        device = training_device(local_rank)
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
        if world_size > 1 and not dist.is_initialized():
            wait_for_rendezvous(rank, world_size)
            dist.init_process_group("nccl" if cuda else "gloo")
        return cls(rank, world_size, local_rank, device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def device_name(self) -> str:
        return describe_device(self.device)

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
