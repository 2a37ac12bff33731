"""How busy other processes keep the CPUs: for benchmarks, whose timings mean little when other jobs share the cores.

The load average counts the processes runnable over the last minute, a job that has just ended among them, so a
benchmark started right after another (a chain of runs) reads as loaded on an otherwise quiet machine.
:func:`busy_elsewhere` instead samples the system's CPU time over a short window while this process sleeps, and
takes this process's own time (its idle-spinning worker threads) out.
"""
from __future__ import annotations

import os
import time

PROC_STAT = "/proc/stat"
# Other processes busy on more than this many CPUs' worth of time: a 2-thread benchmark shares its cores.
LOADED_CPUS = 0.25


def cpu_busy_seconds(stat_text: str) -> float:
    """CPU seconds spent working, summed over all CPUs since boot, from the text of ``/proc/stat``: its first line
    ``cpu user nice system idle iowait irq softirq ...`` in clock ticks; working is user, nice, system, irq and
    softirq (not idle, iowait, or time stolen by a hypervisor)."""
    fields = stat_text.split("\n", 1)[0].split()
    if len(fields) < 8 or fields[0] != "cpu":
        raise ValueError(f"not a /proc/stat text: its first line is {stat_text.splitlines()[:1]!r}")
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _read_busy() -> float:
    with open(PROC_STAT, encoding="ascii") as f:
        return cpu_busy_seconds(f.read())


def busy_elsewhere(seconds: float = 0.5) -> float | None:
    """CPUs' worth of time the processes other than this one worked over ``seconds`` (this one sleeps meanwhile):
    1.0 is one CPU kept busy. None where ``/proc/stat`` cannot be read (not Linux)."""
    try:
        before, own_before = _read_busy(), sum(os.times()[:2])
        time.sleep(seconds)
        after, own_after = _read_busy(), sum(os.times()[:2])
    except (OSError, ValueError):
        return None
    return max(after - before - (own_after - own_before), 0.0) / seconds


def describe(busy: float | None, cpus: int | None = None) -> str:
    """``"other processes busy on 0.1 of 2 CPUs"``, with ``" (UNDER LOAD: other jobs share the CPUs)"`` above
    :data:`LOADED_CPUS`; for a run's header line."""
    cpus = cpus or os.cpu_count() or 1
    if busy is None:
        return f"other processes' CPU time unknown (no {PROC_STAT}), {cpus} CPUs"
    loaded = " (UNDER LOAD: other jobs share the CPUs)" if busy > LOADED_CPUS else ""
    return f"other processes busy on {busy:.1f} of {cpus} CPUs{loaded}"
