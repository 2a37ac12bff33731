"""Progress of long jobs: durations, and periodic lines with rate and ETA.

:class:`Progress` prints one line at most every ``interval`` seconds (and always for the
last unit), e.g.::

    [train evonorm_s0] 120/500 steps (24%) | 3.21 steps/s | 37s elapsed | ETA 1m58s | loss 0.532

Lines go to standard output and are flushed, so they read well in a terminal, a log file
and a CI log alike.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO


def format_duration(seconds: float) -> str:
    """``"45s"``, ``"3m05s"``, ``"1h02m"``, ``"2d03h"``: the two largest units, no fractions."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(round(seconds)))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class Progress:
    """Counts units of work (``update``) and prints a line with rate and ETA now and then.

    ``total=None``: open-ended (no percentage or ETA unless ``eta`` is passed to
    :meth:`update`). ``initial`` units are already done (a resumed run): the rate counts
    only units done by this process.
    """

    def __init__(
        self,
        total: int | None,
        unit: str = "steps",
        prefix: str = "",
        interval: float = 5.0,
        initial: int = 0,
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self.total, self.unit, self.prefix, self.interval = total, unit, prefix, interval
        self.done = self.start_count = initial
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.started = time.monotonic()
        self.printed = float("-inf")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        """Units per second done by this process."""
        return (self.done - self.start_count) / max(self.elapsed, 1e-9)

    def eta(self) -> float:
        if self.total is None or self.rate <= 0:
            return math.nan
        return (self.total - self.done) / self.rate

    def update(self, n: int = 1, *, force: bool = False, eta: float | None = None, **values: Any) -> None:
        """Count ``n`` more units; print a line if ``interval`` passed, at the end, or if ``force``."""
        self.done += n
        now = time.monotonic()
        last = self.total is not None and self.done >= self.total
        if self.enabled and (force or last or now - self.printed >= self.interval):
            self.printed = now
            print(self.line(eta, values), file=self.stream, flush=True)

    def line(self, eta: float | None = None, values: dict | None = None) -> str:
        count = f"{self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.0f}%)" if self.total \
            else f"{self.done} {self.unit}"
        remaining = self.eta() if eta is None else eta
        parts = [count, f"{self.rate:.3g} {self.unit}/s", f"{format_duration(self.elapsed)} elapsed"]
        if math.isfinite(remaining):
            parts.append(f"ETA {format_duration(remaining)}")
        parts += [f"{key} {format_value(value)}" for key, value in (values or {}).items()]
        head = f"[{self.prefix}] " if self.prefix else ""
        return head + " | ".join(parts)
