"""Grids of runs: the cells of a paper table or figure, run resumably, several at a time.

:func:`run_grid` serves every grid command of the suite (``classification/tables.py run``,
``gan/table5.py``, ``detection/miniature.py``, ``search/compare.py``)::

    cells = [Cell(f"{layer}/seed{seed}", done=runs / layer / f"seed{seed}" / "metrics.json",
                  commands=(train_command(layer, seed), evaluate_command(layer, seed)))
             for layer in layers for seed in seeds]
    result = run_grid(cells, runs, jobs=2, name="table5")
    if result.exit_status:
        return result.exit_status

* **Resumable**: a cell whose ``done`` file exists (or whose ``done`` check is true) finished
  before and is skipped; the cells' own commands resume their runs, so the same command
  continues an interrupted grid.
* ``jobs`` cells at a time, each in child processes that die with the runner
  (:mod:`.children`): a process group of their own and a parent-death signal, so neither a
  Ctrl-C, a ``kill`` nor a ``kill -9`` of the runner leaves a cell training.
* Each cell's output is appended to ``FOLDER/<cell id>.log``; a progress line with rate and
  ETA follows every cell that ends.
* A cell that fails is recorded with its exit status and log, the others go on, and the
  summary names the failed ones. SIGINT or SIGTERM stop the cells and the runner with one
  line; what finished is kept.
* One runner per grid folder: it holds ``FOLDER/.lock`` while it runs.
* **Staged cells**: a cell whose next commands depend on what its last ones left (train a run,
  evaluate it, train it further while it still improves) gives ``stages``, asked for the next
  commands each time the previous ones succeeded; it holds its slot until it has no more, so a
  short stage of one cell never leaves a slot idle while another cell's long one runs.
"""
from __future__ import annotations

import contextlib
import shlex
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .children import Child, ForkedCall, reap, start_command, stop_groups
from .progress import Progress, format_duration
from .rundir import RunDir

POLL_SECONDS = 0.2
CANNOT_START = 127  # the shell's status for a command it cannot run
STAGES_FAILED = 1


@dataclass(frozen=True)
class Cell:
    """One run of a grid.

    ``id``: unique in the grid, a relative path such as ``evonorm_s0/seed2`` (its log is
    ``FOLDER/<id>.log``). ``done``: the file the finished cell leaves, or a check that it
    finished. The work is one of ``commands``, run one after another as subprocesses (a
    cell fails at the first that exits with an error); ``function``, called in a forked
    child (Python work of the calling program; it passes nothing back: its results go to files);
    or ``stages``, called in this process when the cell starts and each time the commands it
    returned have all succeeded, returning the next commands (none: the cell is done; an
    exception fails the cell, its traceback in the cell's log).
    """

    id: str
    done: Path | Callable[[], bool]
    commands: tuple[tuple[str, ...], ...] = ()
    function: Callable[[], Any] | None = None
    stages: Callable[[], Sequence[tuple[str, ...]]] | None = None

    def __post_init__(self) -> None:
        if sum((bool(self.commands), self.function is not None, self.stages is not None)) != 1:
            raise ValueError(f"cell {self.id!r}: give one of commands, a function or stages")
        path = PurePosixPath(self.id)
        if not self.id or path.is_absolute() or ".." in path.parts:
            raise ValueError(f"cell id {self.id!r} must be a relative path without '..' (it names the cell's log)")

    def finished(self) -> bool:
        return self.done.exists() if isinstance(self.done, Path) else bool(self.done())


@dataclass
class GridResult:
    """What one :func:`run_grid` did: cells finished now, finished before (skipped), failed (``id -> "exit status
    N, log PATH"``), the signal that stopped it, and the wall-clock and CPU seconds of every cell it started
    (finished, failed or stopped: up to the stop; a paused cell's wall time counts the pause, its CPU time does
    not)."""

    finished: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    stopped_by: signal.Signals | None = None

    @property
    def exit_status(self) -> int:
        """0: every cell finished; 1: some failed; 128 + signal: stopped."""
        if self.stopped_by is not None:
            return 128 + self.stopped_by.value
        return 1 if self.failed else 0


class _CellRun:
    """A cell being run: its current child process, the work still to start, the CPU seconds of the processes
    that ended and, once no child is left to wait for, its exit status (``ended``)."""

    def __init__(self, cell: Cell, log: Path) -> None:
        self.cell, self.log = cell, log
        self.started, self.cpu_seconds = time.monotonic(), 0.0
        self.remaining: list[tuple[str, ...] | Callable[[], Any]] = (
            [cell.function] if cell.function is not None else list(cell.commands))
        self.ended = 0
        self.child: Child | None = self._start_next()

    def _start_next(self) -> Child | None:
        """The next command's process (or the function's); None when there is none to start: the cell has ended
        (``ended``: 0, or why it cannot go on, said in the log)."""
        if not self.remaining and self.cell.stages is not None:
            self.remaining = self._next_stage()
        if not self.remaining:
            return None
        work = self.remaining.pop(0)
        if callable(work):
            log_line(self.log, f"cell {self.cell.id}")
            return ForkedCall(work, self.log)
        log_line(self.log, shlex.join(work))
        try:
            return start_command(work, log=self.log)
        except OSError as error:  # e.g. a program that is not installed
            self._fail(CANNOT_START, f"cannot start {work[0]!r}: {error}")
            return None

    def _next_stage(self) -> list[tuple[str, ...]]:
        try:
            return list(self.cell.stages())
        except Exception:  # the planner's error fails this cell, not the grid
            self._fail(STAGES_FAILED, f"cell {self.cell.id}: its next stage could not be planned\n"
                                      f"{traceback.format_exc()}")
            return []

    def _fail(self, status: int, message: str) -> None:
        self.ended = status
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(message.rstrip("\n") + "\n")

    def poll(self) -> int | None:
        """None while the cell runs, else its exit status (that of the first command that failed, or why the cell
        could not go on)."""
        if self.child is None:
            return self.ended
        status, cpu_seconds = reap(self.child)
        self.cpu_seconds += cpu_seconds
        if status != 0:
            return status
        self.child = self._start_next()
        return None if self.child is not None else self.ended


def log_line(log: Path, command: str) -> None:
    """Mark in ``log`` where the output of ``command`` starts."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {command}\n")


CellEnd = Callable[[str, float, float], None]


def run_grid(cells: Sequence[Cell], folder: str | Path, *, jobs: int = 1, name: str = "grid",
             on_cell_end: CellEnd | None = None) -> GridResult:
    """Run the ``cells`` not yet finished, ``jobs`` at a time, logging to ``folder``; see the module.

    ``on_cell_end(id, seconds, cpu_seconds)`` is called in this process as each cell it started ends (finished,
    failed or stopped), with its wall-clock and CPU seconds: to record a cell's cost beside its results while the
    grid goes on."""
    folder = Path(folder)
    ids = [cell.id for cell in cells]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"cell ids must be unique, repeated: {repeated}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    result = GridResult()
    with RunDir(folder, resume=True):  # one runner per grid
        todo = [cell for cell in cells if not cell.finished()]
        result.skipped = [cell.id for cell in cells if cell not in todo]
        print(f"[{name}] {len(cells)} cells: {len(result.skipped)} finished before, {len(todo)} to run, {jobs} at a "
              f"time; each cell's output goes to {folder}/<cell>.log", flush=True)
        if todo:
            _run_cells(todo, folder, jobs, name, result, on_cell_end)
    return result


def _run_cells(todo: list[Cell], folder: Path, jobs: int, name: str, result: GridResult,
               on_cell_end: CellEnd | None) -> None:
    pending, running = list(todo), []
    progress = Progress(len(todo), "cells", prefix=name, interval=0.0)
    with _stop_signals() as stop:
        try:
            while (pending or running) and stop.signum is None:
                while pending and len(running) < jobs:
                    cell = pending.pop(0)
                    log = folder / f"{cell.id}.log"
                    log.parent.mkdir(parents=True, exist_ok=True)
                    running.append(_CellRun(cell, log))
                time.sleep(POLL_SECONDS)
                for run in list(running):
                    status = run.poll()
                    if status is not None:
                        running.remove(run)
                        _record(run, status, result, progress, on_cell_end)
        finally:
            _stop(running, result, on_cell_end)
    if stop.signum is not None:
        result.stopped_by = signal.Signals(stop.signum)
        print(f"\n[{name}] stopped by {result.stopped_by.name}: {len(result.finished)} cells finished, {len(running)} "
              f"stopped mid-way, {len(pending)} not started; run the same command again to continue (finished cells "
              "are kept, stopped ones resume from their last checkpoint)", flush=True)
    elif result.failed:
        failed = "; ".join(f"{cell} ({why})" for cell, why in result.failed.items())
        print(f"[{name}] {len(result.failed)} of {len(todo)} cells failed: {failed}; the other cells finished. Run the "
              "same command again to retry the failed ones.", flush=True)
    else:
        print(f"[{name}] all {len(todo)} cells finished", flush=True)


def _stop(running: list[_CellRun], result: GridResult, on_cell_end: CellEnd | None) -> None:
    """Stop the cells still running, their seconds until now in ``result``."""
    runs = [run for run in running if run.child is not None]
    for run, cpu_seconds in zip(runs, stop_groups([run.child for run in runs])):
        run.cpu_seconds += cpu_seconds
    for run in running:
        _add_seconds(run, result, on_cell_end)


def _add_seconds(run: _CellRun, result: GridResult, on_cell_end: CellEnd | None) -> float:
    seconds = time.monotonic() - run.started
    result.seconds[run.cell.id], result.cpu_seconds[run.cell.id] = seconds, run.cpu_seconds
    if on_cell_end is not None:
        on_cell_end(run.cell.id, seconds, run.cpu_seconds)
    return seconds


def _record(run: _CellRun, status: int, result: GridResult, progress: Progress, on_cell_end: CellEnd | None) -> None:
    took = format_duration(_add_seconds(run, result, on_cell_end))
    if status == 0:
        result.finished.append(run.cell.id)
        progress.update(finished=f"{run.cell.id} in {took}")
    else:
        result.failed[run.cell.id] = f"exit status {status}, log {run.log}"
        progress.update(FAILED=f"{run.cell.id} after {took} (exit status {status}, log {run.log})")


class _StopRequest:
    signum: int | None = None


@contextlib.contextmanager
def _stop_signals() -> Iterator[_StopRequest]:
    """Turn SIGINT and SIGTERM into a stop request while the block runs (main thread only;
    elsewhere a KeyboardInterrupt still stops the cells on its way out)."""
    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request(signum: int, frame: Any) -> None:
        stop.signum = signum

    previous = {signum: signal.signal(signum, request) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
