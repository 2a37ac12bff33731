"""The search's run folder and command line under bad input: one test per failure class.

Owned folders (non-empty refused, two writers refused), resume keeping the run's own
settings, range-checked flags naming flag/value/range, damaged checkpoint and log files named
with what to do, pool workers dying with a killed search, Ray never joining a cluster it finds.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evonorm_core.experiment.rundir import RunDir
from evonorm_core.search import CandidateResult
from search import backends, evolve
from search.config import read_run_config
from search.rerank import rank

REPO = Path(__file__).resolve().parents[1]
# The same tiny proxy as test_search_e2e: one anchor at 8 px, a few steps.
TINY = ["--anchors", "resnet50_cifar", "--image-size", "8", "--crop-size", "8", "--batch-size", "8",
        "--train-steps", "2", "--quality-steps", "1", "--quality-threshold", "0", "--stability-steps", "1",
        "--stability-batch-size", "4", "--initial-population", "1", "--mode", "S", "--references", "none",
        "--threads", "1", "--workers", "1"]


def error_of(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        evolve.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be >= 1, got 0"),
    (["--time-budget", "nan"], "--time-budget must be a finite number, got nan"),
    (["--time-budget=-5m"], "--time-budget must be > 0, got -300.0"),
    (["--time-budget", "soon"], "not a duration: 'soon'"),
    (["--max-candidates", "-1"], "--max-candidates must be >= 0, got -1"),
    (["--quality-threshold", "5"], "--quality-threshold must be >= 0 and <= 1, got 5.0"),
    (["--lr", "-1"], "--lr must be > 0, got -1.0"),
    (["--tournament-fraction", "0"], "--tournament-fraction must be > 0 and <= 1, got 0.0"),
    (["--window", "0"], "--window must be >= 1, got 0"),
    (["--crop-size", "40"], "--crop-size must be <= --image-size (16), got 40"),
    (["--quality-steps", "500"], "--quality-steps must be <= --train-steps"),
    (["--references", "none", "bn_relu"], "'none' cannot be combined"),
])
def test_bad_numbers_are_refused_naming_flag_value_and_range(tmp_path, capsys, flags, message):
    err = error_of(flags + ["--output-dir", str(tmp_path / "run")], capsys)
    assert message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing is created for a refused configuration


def test_a_used_folder_is_refused_without_resume_and_locked_against_a_second_writer(tmp_path, capsys):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--max-candidates", "2", "--output-dir", str(out)]) == 0
    capsys.readouterr()
    err = error_of(TINY + ["--max-candidates", "2", "--output-dir", str(out)], capsys)
    assert "is not empty" in err and "--resume" in err
    with RunDir(out, resume=True):  # another process (or this one) is writing the run
        err = error_of(["--resume", "--output-dir", str(out)], capsys)
        assert "is in use by process" in err and "two runs cannot write one folder" in err
    lines = (out / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [0, 1]  # nothing appended by the refused runs


def test_resume_keeps_the_runs_settings_and_stop_conditions(tmp_path, capsys):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--max-candidates", "2", "--seed", "3", "--output-dir", str(out)]) == 0
    assert evolve.main(["--resume", "--output-dir", str(out)]) == 0  # no flags: the run's own 2 candidates
    assert read_run_config(out).max_candidates == 2 and read_run_config(out).seed == 3
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 2
    assert evolve.main(["--resume", "--output-dir", str(out), "--max-candidates", "4"]) == 0  # explicitly extended
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 4
    config = read_run_config(out)
    assert (config.max_candidates, config.time_budget, config.proxy.train_steps) == (4, 780.0, 2)
    capsys.readouterr()
    err = error_of(["--resume", "--output-dir", str(out), "--lr", "0.5"], capsys)
    assert "--lr cannot change when resuming: the run was started with 0.03, got 0.5" in err
    err = error_of(["--resume", "--output-dir", str(out), "--preset", "paper"], capsys)
    assert "--preset cannot change when resuming" in err


def test_damaged_checkpoint_and_log_are_named_with_the_line_and_the_fix(tmp_path, capsys):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--max-candidates", "3", "--output-dir", str(out)]) == 0
    capsys.readouterr()
    log, checkpoint = out / "candidates.jsonl", out / "checkpoint.json"
    good_log, good_checkpoint = log.read_text(), checkpoint.read_text()

    log.write_text(good_log[:-40])  # a write cut short by a kill, and the lines it covers gone
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert f"search log '{log}', line 3: not valid JSON" in err and "line is incomplete" in err

    lines = good_log.splitlines()
    log.write_text("\n".join([lines[0], '{"id": 1}', lines[2]]) + "\n")
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert f"search log '{log}', line 2: not a candidate record" in err

    log.write_text(good_log)
    checkpoint.write_text(good_checkpoint[:100])
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert f"search checkpoint '{checkpoint}' is not valid JSON" in err and "truncated" in err

    checkpoint.write_text(json.dumps({"logged": 1}))
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert "lacks" in err and "delete the run folder" in err
    assert "Traceback" not in err


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_die_with_a_killed_search(tmp_path):
    command = [sys.executable, str(REPO / "search" / "evolve.py"), *TINY[:-2], "--workers", "2",
               "--train-steps", "400", "--quality-steps", "400", "--time-budget", "5m",
               "--output-dir", str(tmp_path / "run")]
    search = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, workers = time.monotonic() + 120, []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.2)
            workers = _children(search.pid)
        assert len(workers) >= 2, "the pool never started"
        os.kill(search.pid, signal.SIGKILL)
        search.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "pool workers outlived the killed search"
    finally:
        if search.poll() is None:
            search.kill()


def test_ray_without_an_address_starts_its_own_local_ray(monkeypatch):
    calls = []

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            calls.append(kwargs)

        @staticmethod
        def remote(**kwargs):
            return lambda fn: fn

        @staticmethod
        def put(value):
            return value

        @staticmethod
        def cluster_resources():
            return {"CPU": 64}

    monkeypatch.setitem(sys.modules, "ray", FakeRay)
    executor = backends.RayExecutor(lambda genome: None, workers=3)
    assert calls[-1]["address"] == "local" and calls[-1]["num_cpus"] == 3 and executor.capacity == 3
    executor = backends.RayExecutor(lambda genome: None, workers=3, address="auto")
    assert calls[-1]["address"] == "auto" and "num_cpus" not in calls[-1] and executor.capacity == 64


def test_rerank_ranks_best_first_with_the_sample_std_and_the_bn_relu_verdict():
    """search/rerank.py's ranking from per-seed results written by hand (no training)."""
    anchors = ("a", "b")
    per_seed = {"#7": [(0.90, 0.80), (0.92, 0.84)], "bn_relu": [(0.95, 0.85), (0.97, 0.87)],
                "#3": [(0.96, 0.86), (0.98, 0.88)]}
    results = [{"name": name, "seed": seed, "result": CandidateResult.accept(dict(zip(anchors, accs))).to_dict()}
               for name, runs in per_seed.items() for seed, accs in enumerate(runs)]
    chosen = {name: {"expression": name, "genome": {}} for name in per_seed}
    rows = rank(chosen, results, anchors)
    assert [r["name"] for r in rows] == ["#3", "bn_relu", "#7"]
    best = rows[0]
    assert best["mean"] == 0.92 and best["anchors"]["a"]["mean"] == 0.97
    assert best["anchors"]["a"]["std"] == round(2 ** 0.5 * 0.01, 4)  # sample std of 0.96, 0.98
    assert [r["at_least_bn_relu_on_every_anchor"] for r in rows] == [True, True, False]


def test_value_at_reads_the_top10_curve_as_a_step_function():
    """Fig. 10 compares strategies at equal budgets: the value after N candidates is the curve's last point
    at or before N (the curve only has points where the top-10 changed), None before the first point."""
    from search.compare import value_at

    curve = [[3, 0.5], [7, 0.6], [10, 0.7]]
    assert value_at(curve, 2) is None and value_at([], 5) is None
    assert [value_at(curve, n) for n in (3, 6, 7, 9, 10, 1000)] == [0.5, 0.5, 0.6, 0.6, 0.7, 0.7]
