"""How a training job ends when it cannot go on: one line, an exit status, and what was kept.

:class:`StopCleanly` wraps a training command's work (``with StopCleanly(...) as stop:``):

* **A diverged run** (a ``FloatingPointError``: a non-finite loss) is a result, not a crash:
  one line names the step and what to try, ``RUN/diverged.json`` records it (the step, the
  error and the advice; written under the folder's lock) and the command exits with
  :data:`EXIT_DIVERGED`. The run's checkpoints hold the last state before the divergence
  (nothing diverged is saved: the step that diverged raises before its checkpoint).
* **SIGINT (Ctrl-C) and SIGTERM** stop the job with one line saying how to resume (from the
  run's last checkpoint; an interrupted checkpoint write leaves the previous one whole) and exit
  status 130 or 143, with no ``KeyboardInterrupt`` traceback. A trainer that checkpoints on the
  way out holds them back during a step with :func:`stop_signals_after_block`.
* **A full disk** (:class:`~evonorm_core.experiment.files.DiskFullError`) is one line naming
  the file; the files being replaced are left whole.

Only the main thread can take signals; elsewhere the handlers are left as they are.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType

from .files import DiskFullError, atomic_write_json
from .rundir import RunDir, RunDirError

EXIT_DIVERGED = 3
DIVERGED_FILE = "diverged.json"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a :class:`StopCleanly` block ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Diverged(FloatingPointError):
    """A non-finite loss at ``step`` (``values``: the losses of that step)."""

    def __init__(self, step: int, values: dict[str, float]) -> None:
        shown = ", ".join(f"{name} {value}" for name, value in values.items())
        super().__init__(f"non-finite loss at step {step} ({shown})")
        self.step = step


def divergence_step(error: FloatingPointError) -> int | None:
    """The step a divergence happened at: :attr:`Diverged.step`, else the ``step N`` its message names."""
    step = getattr(error, "step", None)
    if isinstance(step, int):
        return step
    found = re.search(r"\bstep (\d+)", str(error))
    return int(found[1]) if found else None


@dataclasses.dataclass
class ReceivedSignal:
    """The stop signal that arrived in a :func:`stop_signals_interrupt` block (``signum``; None: none).

    Kept apart from the exception because code between the handler and the ``except`` may replace
    the :class:`Interrupted` with a plain ``KeyboardInterrupt`` (Ray's ``wait`` does)."""

    signum: int | None = None


def stop_signal(received: ReceivedSignal | None) -> signal.Signals:
    """The signal that stopped a :func:`stop_signals_interrupt` block: the one ``received`` records, else SIGINT
    (a ``KeyboardInterrupt`` with no signal behind it, or one raised before the block began)."""
    return signal.Signals(received.signum if received is not None and received.signum else signal.SIGINT)


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[ReceivedSignal]:
    """While the block runs, SIGINT and SIGTERM raise :class:`Interrupted` (a ``KeyboardInterrupt``
    carrying ``signum``) in the main thread and are recorded in the :class:`ReceivedSignal` it yields;
    elsewhere the handlers are left as they are. The previous handlers come back on the way out. Enter
    it after starting anything that installs handlers of its own: Ray's driver replaces SIGTERM's with
    one that aborts the process."""
    received = ReceivedSignal()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        received.signum = signum
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def stop_signals_after_block() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs (one training step: a stop inside it would leave
    the models half updated) and deliver the first that arrived as the block ends, to the handlers in
    place before (:func:`stop_signals_interrupt`'s raise :class:`Interrupted`). Main thread only, as there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = ReceivedSignal()

    def hold(signum: int, frame: FrameType | None) -> None:
        received.signum = received.signum or signum

    previous = {signum: signal.signal(signum, hold) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received.signum is not None:
        signal.raise_signal(received.signum)


class StopCleanly:
    """Run a training command's work so that divergence, signals and a full disk end it with one line.

    ``command`` is how the user starts it (``python gan/train_biggan.py``), ``advice`` what a new
    run could change after a divergence ("lower learning rates (--g-lr, --d-lr)"), ``resume`` the
    command line that continues an interrupted run. ``run_dir`` (may be set as the work goes on) is the folder where a
    divergence is recorded. Leaving the block with one of these raises ``SystemExit`` with the
    status; any other exception passes through.
    """

    def __init__(self, command: str, advice: str, resume: str, run_dir: str | Path | None = None) -> None:
        self.command, self.advice, self.resume = command, advice, resume
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._signals = contextlib.ExitStack()
        self._received = ReceivedSignal()

    def __enter__(self) -> "StopCleanly":
        self._received = self._signals.enter_context(stop_signals_interrupt())
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._signals.close()
        if isinstance(error, KeyboardInterrupt):
            signum = self._received.signum or getattr(error, "signum", signal.SIGINT)
            _say(f"{self.command}: stopped by {signal.Signals(signum).name}; the run resumes from its last "
                 f"checkpoint with: {self.resume}")
            raise SystemExit(128 + signum) from None
        if isinstance(error, FloatingPointError):
            raise SystemExit(self._diverged(error)) from None
        if isinstance(error, DiskFullError):
            _say(f"{self.command}: error: {error}")
            raise SystemExit(1) from None

    def _diverged(self, error: FloatingPointError) -> int:
        step = divergence_step(error)
        what = str(error) if step is None or re.search(rf"\bstep {step}\b", str(error)) else f"{error} at step {step}"
        recorded = self._record(error, step)
        _say(f"{self.command}: the run diverged: {what}. Try a new run with {self.advice}. {recorded}")
        return EXIT_DIVERGED

    def _record(self, error: FloatingPointError, step: int | None) -> str:
        """Write ``RUN/diverged.json`` under the folder's lock; say where it went (or why not)."""
        kept = "Its checkpoints (if any) hold the state before the divergence."
        if self.run_dir is None or os.environ.get("RANK", "0") != "0" or not self.run_dir.is_dir():
            return kept
        record = {"diverged": True, "step": step, "error": str(error), "advice": f"try a new run with {self.advice}"}
        try:
            with RunDir(self.run_dir, resume=True):
                atomic_write_json(self.run_dir / DIVERGED_FILE, record)
        except (RunDirError, OSError) as failure:
            return f"It could not be recorded in {str(self.run_dir)!r} ({failure}). {kept}"
        return f"Recorded in {str(self.run_dir / DIVERGED_FILE)!r}. {kept}"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
