"""torch.distributed for the tests: as one process of a larger world sees it, in the test's own process, and a
free port for the tests that start real process groups.

The synchronized paths (``sync=True``) then run where mutation testing (``tools/mutation.py``) sees which test
covers them; the same with two real gloo processes is ``test_sync_batch_stats.py``.
"""
from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

GROUP = object()  # a process group, as far as these calls can tell


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class World:
    """torch.distributed as one process of ``size`` sees it (world sizes per group in ``sizes``), whose
    all-reduce adds ``other`` (the other rank's contribution) and records what it was given."""

    def __init__(self, monkeypatch, size: int = 2, initialized: bool = True, available: bool = True,
                 sizes: dict | None = None) -> None:
        monkeypatch.setattr(dist, "is_available", lambda: available)
        monkeypatch.setattr(dist, "is_initialized", lambda: initialized)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: (sizes or {}).get(group, size))
        monkeypatch.setattr(dist_nn, "all_reduce", self.all_reduce)
        self.other: torch.Tensor | None = None
        self.sent: list[tuple[torch.Tensor, object]] = []

    def all_reduce(self, tensor: torch.Tensor, op=None, group=None) -> torch.Tensor:
        self.sent.append((tensor.detach().clone(), group))
        return tensor if self.other is None else tensor + self.other
