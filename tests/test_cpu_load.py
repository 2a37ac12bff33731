"""evonorm_core.experiment.cpu_load: other processes' CPU time, as the benchmarks report it."""
import os
import subprocess
import sys

import pytest

from evonorm_core.experiment import cpu_load

STAT = """cpu  1000 50 300 90000 40 20 30 70 0 0
cpu0 500 25 150 45000 20 10 15 35 0 0
intr 12345
"""


def test_busy_seconds_count_user_nice_system_irq_and_softirq_not_idle_iowait_or_steal():
    ticks = os.sysconf("SC_CLK_TCK")
    assert cpu_load.cpu_busy_seconds(STAT) == pytest.approx((1000 + 50 + 300 + 20 + 30) / ticks)


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu 1 2 3\n"])
def test_a_text_that_is_not_proc_stat_is_refused_with_its_first_line(text):
    with pytest.raises(ValueError, match="not a /proc/stat text"):
        cpu_load.cpu_busy_seconds(text)


def test_this_processs_own_cpu_time_is_taken_out(monkeypatch):
    """The system worked 0.5 s over the window, 0.2 s of it this process's (its threads): 0.3 s
    elsewhere, 0.6 of a CPU."""
    readings = iter([10.0, 10.5])
    own = iter([(1.0, 0.5, 0, 0, 0), (1.1, 0.6, 0, 0, 0)])  # os.times(): user, system, children's, elapsed
    monkeypatch.setattr(cpu_load, "_read_busy", lambda: next(readings))
    monkeypatch.setattr(cpu_load.os, "times", lambda: next(own))
    monkeypatch.setattr(cpu_load.time, "sleep", lambda seconds: None)
    assert cpu_load.busy_elsewhere(0.5) == pytest.approx(0.6)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_process_spinning_on_one_cpu_is_seen():
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"])
    try:
        busy = cpu_load.busy_elsewhere(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.5
    assert "UNDER LOAD" in cpu_load.describe(busy, 2)


def test_without_proc_stat_the_busy_time_is_unknown_and_said_so(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_load, "PROC_STAT", str(tmp_path / "missing"))
    assert cpu_load.busy_elsewhere(0.01) is None
    assert "unknown" in cpu_load.describe(None, 2)


def test_a_quiet_reading_is_not_flagged():
    assert cpu_load.describe(0.1, 2) == "other processes busy on 0.1 of 2 CPUs"
    assert "UNDER LOAD" in cpu_load.describe(cpu_load.LOADED_CPUS + 0.1, 2)
