"""The grid runner and its child processes: finished cells skipped, --jobs, a failing cell, per-cell logs,
SIGINT/SIGTERM stopping with one line, and a SIGKILL of the runner leaving no cell running and no lock held."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import RunDir


def cell_command(result: Path, *, sleep: float = 0.0, exit_status: int = 0) -> tuple[str, ...]:
    """A fake cell: prints, sleeps, writes its result file and exits with ``exit_status``."""
    code = (f"import time, pathlib; print('training'); time.sleep({sleep}); "
            f"pathlib.Path({str(result)!r}).write_text('done') if {exit_status} == 0 else None; "
            f"raise SystemExit({exit_status})")
    return (sys.executable, "-c", code)


def test_finished_cells_are_skipped_and_the_others_run_with_their_logs(tmp_path, capsys):
    (tmp_path / "a.result").write_text("done")  # finished before
    cells = [Cell(name, done=tmp_path / f"{name}.result", commands=(cell_command(tmp_path / f"{name}.result"),))
             for name in ("a", "b", "c")]
    result = run_grid(cells, tmp_path, jobs=2, name="fake")
    assert (result.skipped, sorted(result.finished), result.failed, result.exit_status) == (["a"], ["b", "c"], {}, 0)
    assert not (tmp_path / "a.log").exists() and "training" in (tmp_path / "b.log").read_text()
    out = capsys.readouterr().out
    assert "[fake] 3 cells: 1 finished before, 2 to run, 2 at a time" in out
    assert "[fake] 2/2 cells (100%)" in out and "cells/s" in out and "all 2 cells finished" in out
    assert run_grid(cells, tmp_path, jobs=2).skipped == ["a", "b", "c"]  # the same command again: nothing to do


def test_jobs_run_cells_at_the_same_time(tmp_path):
    cells = [Cell(f"c{i}", done=tmp_path / f"{i}.result", commands=(cell_command(tmp_path / f"{i}.result", sleep=1.5),))
             for i in range(4)]
    started = time.monotonic()
    assert run_grid(cells, tmp_path, jobs=4).exit_status == 0
    assert time.monotonic() - started < 4 * 1.5  # in parallel, not one after another


def test_each_finished_cell_has_its_wall_and_cpu_seconds_over_all_its_commands(tmp_path):
    """CPU seconds are the user + system time of the cell's processes (reaped with wait4), so a cell that sleeps or
    is paused costs wall time, not CPU; a cell of two commands counts both."""
    spin = (sys.executable, "-c", "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass")
    cells = [Cell("sleeps", done=tmp_path / "s.result", commands=(cell_command(tmp_path / "s.result", sleep=1.0),)),
             Cell("spins", done=tmp_path / "w.result", commands=(spin, cell_command(tmp_path / "w.result")))]
    result = run_grid(cells, tmp_path, jobs=1)
    assert result.seconds["sleeps"] >= 1.0 and result.cpu_seconds["sleeps"] < 0.9
    assert result.cpu_seconds["spins"] >= 0.6 and result.seconds["spins"] >= result.cpu_seconds["spins"] - 0.05


def test_a_failing_cell_is_recorded_with_its_log_and_the_others_go_on(tmp_path, capsys):
    cells = [Cell("good", done=tmp_path / "good.result", commands=(cell_command(tmp_path / "good.result"),)),
             Cell("bad/seed0", done=tmp_path / "bad.result",
                  commands=(cell_command(tmp_path / "bad.result", exit_status=3), cell_command(tmp_path / "never"))),
             Cell("missing", done=tmp_path / "m.result", commands=(("/no/such/program",),)),
             Cell("raises", done=tmp_path / "r.result", function=lambda: 1 / 0)]
    result = run_grid(cells, tmp_path, jobs=1)
    assert result.finished == ["good"] and result.exit_status == 1
    assert result.failed == {"bad/seed0": f"exit status 3, log {tmp_path / 'bad/seed0.log'}",
                             "missing": f"exit status 127, log {tmp_path / 'missing.log'}",
                             "raises": f"exit status 1, log {tmp_path / 'raises.log'}"}
    assert not (tmp_path / "never").exists()  # a cell stops at its first failing command
    assert "ZeroDivisionError" in (tmp_path / "raises.log").read_text()
    assert "cannot start '/no/such/program'" in (tmp_path / "missing.log").read_text()
    out = capsys.readouterr().out
    assert "3 of 4 cells failed: bad/seed0 (exit status 3, log" in out and "retry the failed ones" in out


def test_function_cells_run_in_a_child_with_their_output_in_the_log(tmp_path):
    def work():
        print("from the child", os.getpid())
        (tmp_path / "f.result").write_text(str(os.getpid()))

    assert run_grid([Cell("f", done=tmp_path / "f.result", function=work)], tmp_path).finished == ["f"]
    child = int((tmp_path / "f.result").read_text())
    assert child != os.getpid() and f"from the child {child}" in (tmp_path / "f.log").read_text()


def test_a_staged_cell_holds_its_slot_through_its_stages_and_the_next_cell_starts_when_it_ends(tmp_path):
    """Stages are asked for after each succeeds, with what the last left on disk; while a staged cell works through
    short stages beside a long cell, the third cell waits for the staged one only (the long one waits for it)."""
    counter = tmp_path / "stages"
    asked = []

    def stages():
        done = len(counter.read_text()) if counter.exists() else 0
        asked.append(done)
        append = f"import pathlib; p = pathlib.Path({str(counter)!r}); p.write_text((p.read_text() if p.exists() else '') + 'x')"
        return [(sys.executable, "-c", append)] if done < 3 else []

    waits_for_third = (sys.executable, "-c", "import pathlib, sys, time\nend = time.monotonic() + 60\n"
                       f"while not pathlib.Path({str(tmp_path / 'third.result')!r}).exists():\n"
                       "    if time.monotonic() > end: sys.exit(1)\n    time.sleep(0.05)\n"
                       f"pathlib.Path({str(tmp_path / 'long.result')!r}).write_text('done')")
    cells = [Cell("staged", done=lambda: False, stages=stages),
             Cell("long", done=tmp_path / "long.result", commands=(waits_for_third,)),
             Cell("third", done=tmp_path / "third.result", commands=(cell_command(tmp_path / "third.result"),))]
    result = run_grid(cells, tmp_path, jobs=2)
    assert (sorted(result.finished), result.failed) == (["long", "staged", "third"], {})
    assert asked == [0, 1, 2, 3] and counter.read_text() == "xxx"
    assert (tmp_path / "staged.log").read_text().count("=====") == 3  # one marked command per stage


def test_a_stage_planner_that_raises_fails_its_cell_with_the_traceback_in_its_log(tmp_path):
    def stages():
        raise RuntimeError("no evaluation at the target step")

    cells = [Cell("planned", done=lambda: False, stages=stages),
             Cell("good", done=tmp_path / "good.result", commands=(cell_command(tmp_path / "good.result"),))]
    ended = []
    result = run_grid(cells, tmp_path, jobs=1,
                      on_cell_end=lambda i, seconds, cpu: ended.append((i, (tmp_path / "good.result").exists())))
    assert result.finished == ["good"] and result.failed == {"planned": f"exit status 1, log {tmp_path / 'planned.log'}"}
    log = (tmp_path / "planned.log").read_text()
    assert "its next stage could not be planned" in log and "RuntimeError: no evaluation at the target step" in log
    assert set(result.seconds) == {"planned", "good"}  # a failed cell's time counts too
    assert ended == [("planned", False), ("good", True)]  # reported as each ends, not when the grid does


def test_done_may_be_a_check(tmp_path):
    calls = []
    cell = Cell("x", done=lambda: calls.append(1) or True, commands=(("false",),))
    assert run_grid([cell], tmp_path).skipped == ["x"] and calls == [1]


@pytest.mark.parametrize("cells,message", [
    ([Cell("a", done=Path("x"), commands=(("true",),)), Cell("a", done=Path("y"), commands=(("true",),))],
     r"cell ids must be unique, repeated: \['a'\]"),
])
def test_bad_grids_are_refused(cells, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        run_grid(cells, tmp_path)


@pytest.mark.parametrize("make,message", [
    (lambda: Cell("../x", done=Path("x"), commands=(("true",),)), "must be a relative path without '..'"),
    (lambda: Cell("x", done=Path("x")), "give one of commands, a function or stages"),
    (lambda: Cell("x", done=Path("x"), commands=(("true",),), function=print), "give one of commands, a function"),
    (lambda: Cell("x", done=Path("x"), function=print, stages=tuple), "give one of commands, a function or stages"),
])
def test_bad_cells_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# A runner in a process of its own: two cells that hold their run folder's lock, write their pid and sleep.
RUNNER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from evonorm_core.experiment.grid import Cell, run_grid
    from evonorm_core.experiment.rundir import RunDir

    folder = Path(sys.argv[1])
    HOLD = ("import os, sys, time; from evonorm_core.experiment.rundir import RunDir; "
            "d = RunDir(sys.argv[1], resume=True); end = time.process_time() + 0.3\\n"
            "while time.process_time() < end: pass\\n"
            "open(sys.argv[1] + '.pid', 'w').write(str(os.getpid())); time.sleep(120)")

    def hold():
        run = RunDir(folder / "function", resume=True)
        (folder / "function.pid").write_text(str(os.getpid()))
        time.sleep(120)

    cells = [Cell("command", done=folder / "never", commands=((sys.executable, "-c", HOLD, str(folder / "command")),)),
             Cell("function", done=folder / "never", function=hold)]
    result = run_grid(cells, folder, jobs=2, name="held", on_cell_end=lambda i, seconds, cpu: print("ended", i))
    print("cpu seconds of the command cell", result.cpu_seconds["command"], "cells timed", sorted(result.seconds))
    sys.exit(result.exit_status)
""")


def start_runner(folder: Path) -> tuple[subprocess.Popen, list[int]]:
    """The runner, once both cells are running; their pids."""
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(folder)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    pid_files = [folder / "command.pid", folder / "function.pid"]
    deadline = time.monotonic() + 60
    while not all(p.is_file() and p.read_text() for p in pid_files):
        assert time.monotonic() < deadline and runner.poll() is None, runner.communicate()
        time.sleep(0.1)
    return runner, [int(p.read_text()) for p in pid_files]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(pid) for pid in pids)


def no_lock_held(folder: Path) -> bool:
    for path in (folder, folder / "command", folder / "function"):
        RunDir(path, resume=True).close()  # raises RunDirError "is in use" if a survivor held it
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_sigkill_of_the_runner_leaves_no_cell_running_and_no_lock_held(tmp_path):
    runner, cells = start_runner(tmp_path)
    assert all(alive(pid) for pid in cells)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    assert gone(cells) and no_lock_held(tmp_path)


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_stop_the_cells_with_one_line_and_no_traceback(signum, status, tmp_path):
    runner, cells = start_runner(tmp_path)
    runner.send_signal(signum)
    out, err = runner.communicate(timeout=30)
    assert runner.returncode == status and gone(cells) and no_lock_held(tmp_path)
    assert f"[held] stopped by {signal.Signals(signum).name}: 0 cells finished, 2 stopped mid-way, 0 not started" in out
    assert "Traceback" not in out + err
    cpu_seconds = float(out.split("cpu seconds of the command cell ")[1].split()[0])
    assert cpu_seconds >= 0.3 and "cells timed ['command', 'function']" in out  # stopped cells' time counts
    assert "ended command" in out and "ended function" in out


def test_a_second_runner_on_the_same_grid_is_refused(tmp_path):
    runner, _ = start_runner(tmp_path)
    try:
        with pytest.raises(RuntimeError, match=f"is in use by process {runner.pid}"):
            run_grid([Cell("x", done=tmp_path / "x", commands=(("true",),))], tmp_path)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=30)


def test_the_training_pools_refuse_to_fork_where_autograd_cannot_run_in_the_children():
    """In a fresh process autograd runs in forked children; once the process has compiled a training step it cannot
    (PyTorch refuses), and a training pool says so, naming its work and the cause, before it forks any worker.
    Run in a fresh process: the test's own process may have compiled something already."""
    code = textwrap.dedent("""
        import torch
        from evonorm_core.experiment import children
        print(children.autograd_survives_fork())
        children.training_pool(1, "warm-up runs").shutdown()
        torch.compile(torch.nn.Linear(2, 2), backend="aot_eager")(torch.randn(1, 2)).sum().backward()
        print(children.autograd_survives_fork())
        try:
            children.training_pool(1, "the test's runs")
        except RuntimeError as error:
            print(error)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[:2] == ["True", "False"], done.stderr[-2000:]
    assert lines[2].startswith("the test's runs run in children forked from this process, and PyTorch's autograd "
                               "cannot run in them: this process has run autograd on fake tensors (torch.compile")
    assert lines[2].endswith("start it from a fresh Python process")
