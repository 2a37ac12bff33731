"""Child processes that die with their parent.

Every process the suite starts for a long job (a grid's cells, a search's pool workers, the
steps of a reproduction) is started here so that it cannot outlive the process that started
it, however that one ends:

* it asks Linux to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``, requested
  in the child right after the fork; if the parent is already gone it exits at once). The
  signal follows the *thread* that started the child, so start children from a thread that
  lives as long as they should (the main thread);
* it runs in a process group of its own, so a terminal's Ctrl-C reaches only the parent,
  which stops the whole group (:func:`stop_groups`) and then says so itself.

Elsewhere than Linux there is no parent-death signal: children then end when the parent
stops their group (any exit but a SIGKILL).
"""
from __future__ import annotations

import concurrent.futures as futures
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# loaded here, not in a child between fork and exec (where as little as possible should run)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) \
    if sys.platform.startswith("linux") else None


def die_with_parent(parent: int) -> None:
    """In a child: be SIGKILLed when the parent (process ``parent``) dies; exit now if it already has."""
    if _libc is None:
        return
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def start_command(argv: Sequence[str], *, log: Path | None = None, **popen: Any) -> subprocess.Popen:
    """Start ``argv`` in a process group of its own that dies with this process.

    ``log``: the file its standard output and error are appended to (default: this process's).
    ``popen``: further :class:`subprocess.Popen` arguments (``cwd``, ``env``).
    """
    parent = os.getpid()
    out = open(log, "ab") if log is not None else None  # closed below: the child keeps its own copy
    try:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT if out is not None else None, process_group=0,
                                preexec_fn=lambda: die_with_parent(parent), **popen)
    finally:
        if out is not None:
            out.close()


def run_command(argv: Sequence[str], **popen: Any) -> int:
    """Run ``argv`` to its end as :func:`start_command` starts it; its exit status. If this process
    is interrupted meanwhile (Ctrl-C, an exception), the command's group is stopped first."""
    child = start_command(argv, **popen)
    try:
        return child.wait()
    finally:
        stop_groups([child])


def autograd_survives_fork() -> bool:
    """Whether PyTorch's autograd can run in a child forked from this process now (a child is forked to try one
    tiny backward).

    Once autograd in this process has run on fake tensors (``torch.compile`` or ``torch.export`` of a training
    graph), PyTorch refuses autograd in every child forked afterwards ("Unable to handle autograd's threading in
    combination with fork-based multiprocessing", https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork); a
    process that compiled nothing forks safely."""
    import torch  # here: this module starts children of any kind, and only this check needs torch

    pid = os.fork()
    if pid == 0:
        try:
            x = torch.zeros(1, requires_grad=True)
            (x * 2).sum().backward()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def check_autograd_survives_fork(what: str) -> None:
    """Raise a ``RuntimeError`` naming ``what`` (forked workers that train) unless :func:`autograd_survives_fork`."""
    if not autograd_survives_fork():
        raise RuntimeError(
            f"{what} run in children forked from this process, and PyTorch's autograd cannot run in them: this process "
            "has run autograd on fake tensors (torch.compile or torch.export of a training graph), after which PyTorch "
            "refuses autograd in forked children (https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork); start "
            "it from a fresh Python process")


def training_pool(workers: int, what: str) -> futures.ProcessPoolExecutor:
    """``workers`` forked processes for ``what`` (work that trains with autograd), each dying with this process;
    the ``RuntimeError`` of :func:`check_autograd_survives_fork` where autograd could not run in them."""
    check_autograd_survives_fork(what)
    return futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                       initializer=die_with_parent, initargs=(os.getpid(),))


class ForkedCall:
    """``function()`` run in a forked child with a process group of its own that dies with this
    process, its output appended to ``log``; the exit status is 0 when it returned, 1 when it
    raised (the traceback goes to the log). Nothing is passed back but the status."""

    def __init__(self, function: Callable[[], Any], log: Path) -> None:
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            _run_in_child(function, log, parent)
        _set_group(self.pid)  # also in the parent: the group exists before the parent signals it
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status if the child has ended (negative: the signal that ended it), else None."""
        return reap(self)[0]

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _run_in_child(function: Callable[[], Any], log: Path, parent: int) -> None:
    """The forked child's whole life: never returns into the parent's code."""
    code = 1
    try:
        _set_group(0)
        die_with_parent(parent)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # also where a caller had replaced them (pytest)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        function()
        code = 0
    except SystemExit as stop:  # exit(message) and exit(status) as in a program of its own
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    except BaseException:  # reported in the log; nothing reaches the parent's code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no atexit handlers or finalizers of the parent's state


def _set_group(pid: int) -> None:
    try:
        os.setpgid(pid, pid)
    except (PermissionError, ProcessLookupError):  # the child already exec'd or ended: its own call did it
        pass


Child = subprocess.Popen | ForkedCall


def reap(child: Child) -> tuple[int | None, float]:
    """``child``'s exit status (None while it runs; negative: the signal that ended it) and, when this call reaps
    it, the CPU seconds (user + system) it and the descendants it waited for used; 0.0 otherwise. The status is
    handed to ``child`` (its ``returncode``), so its own ``poll``/``wait`` return it afterwards."""
    if child.returncode is not None:
        return child.returncode, 0.0
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if not pid:
        return None, 0.0
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_utime + usage.ru_stime


def stop_groups(children: Sequence[Child], grace: float = 5.0) -> list[float]:
    """Stop every child's process group: SIGTERM, then SIGKILL what is left after ``grace`` seconds;
    the children are reaped. Returns each child's CPU seconds as :func:`reap` measures them (0.0 for
    one reaped before)."""
    cpu_seconds = [0.0] * len(children)

    def running() -> list[Child]:
        for i, child in enumerate(children):
            if child.returncode is None:
                cpu_seconds[i] += reap(child)[1]
        return [child for child in children if child.returncode is None]

    stopping = running()
    _signal_groups(stopping, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and running():
        time.sleep(0.05)
    _signal_groups(stopping, signal.SIGKILL)  # also what the children left behind in their groups
    while running():
        time.sleep(0.01)
    return cpu_seconds


def _signal_groups(children: Iterable[Child], signum: int) -> None:
    for child in children:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:  # the group is gone
            pass
