"""The search's run folder and command line under bad input: one test per failure class.

Owned folders (non-empty refused, two writers refused), resume keeping the run's own
settings, range-checked flags naming flag/value/range, damaged checkpoint and log files named
with what to do, pool workers dying with a killed search, Ray never joining a cluster it finds.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evonorm_core.experiment.config import ConfigError, save_config
from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.rundir import RunDir, open_run
from evonorm_core.search import (
    CandidateRecord,
    CandidateResult,
    EvolutionConfig,
    LayerSearch,
    Stage,
    parse,
    read_checkpoint,
)
from evonorm_suite.search import backends, evolve
from evonorm_suite.search.compare import check_started_run, collect, fresh_argv, run_cell, run_folder, value_at
from evonorm_suite.search.config import CONFIG_FILE, REFERENCE_LAYERS, RUN_KIND, SearchConfig, read_run_config
from evonorm_suite.search.presets import preset
from evonorm_suite.search.rerank import rank

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
    (["--crop-size", "40"], "--crop-size must be <= --image-size (28), got 40"),
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
    checkpoint.write_text("[]")
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert f"search checkpoint '{checkpoint}' is not a JSON object" in err and "delete the run folder" in err
    state = json.loads(good_checkpoint)
    for changed, says in (({"metadata": []}, "its metadata must be an object"),
                          ({"config": {**state["config"], "mode": "Q"}},
                           "its evolution settings are not this version's")):
        checkpoint.write_text(json.dumps({**state, **changed}))
        err = error_of(["--resume", "--output-dir", str(out)], capsys)
        assert f"search checkpoint '{checkpoint}': {says}" in err and "Traceback" not in err
    checkpoint.write_text(good_checkpoint)
    first = json.loads(lines[0])
    log.write_text("\n".join([json.dumps({**first, "genome": {**first["genome"], "nodes": [["nope", 0]]}}),
                              *lines[1:]]) + "\n")
    err = error_of(["--resume", "--output-dir", str(out)], capsys)
    assert f"search log '{log}', line 1: not a candidate record" in err and "Traceback" not in err
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
    # Ray's own resolution of "auto" (a real ray._private imported by an earlier test would look for a running
    # cluster): the fake has none, so "auto" stays "auto" and the fake's init gets it.
    monkeypatch.setitem(sys.modules, "ray._private.services", None)
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
    assert [r.get("at_least_bn_relu_on_every_anchor") for r in rows] == [True, None, False]  # BN-ReLU: the yardstick


def test_value_at_reads_the_top10_curve_as_a_step_function():
    """Fig. 10 compares strategies at equal budgets: the value after N candidates is the curve's last point
    at or before N (the curve only has points where the top-10 changed), None before the first point."""
    curve = [[3, 0.5], [7, 0.6], [10, 0.7]]
    assert value_at(curve, 2) is None and value_at([], 5) is None
    assert [value_at(curve, n) for n in (3, 6, 7, 9, 10, 1000)] == [0.5, 0.5, 0.6, 0.6, 0.7, 0.7]


# ---------------------------------------------------------------- summaries of hand-made runs (no training)
LAYERS_BY_LABEL = {"a": "tanh(x)", "b": "sigmoid(x)", "c": "x * sigmoid(x)", "d": "max(x, 0)", "q": "abs(x)",
                   "s": "exp(x)", "x": "x / instance_std(x)", "y": "x / group_std(x)", "z": "square(x)",
                   "bn": REFERENCE_LAYERS["bn_relu"]}
"""Hand-made records' layers: one distinct layer per label."""


def record(i, fp, accs=None, stage=None, cache_hit=False, timings=None):
    """A log record of candidate ``i`` with the layer labelled ``fp`` (:data:`LAYERS_BY_LABEL`): accepted with
    ``accs`` (anchor -> accuracy) unless ``stage`` rejected it."""
    accs = accs or {}
    result = (CandidateResult.accept(accs, timings) if stage is None
              else CandidateResult.reject(stage, "low", accs, timings))
    genome = parse(LAYERS_BY_LABEL[fp]).to_dict()
    return CandidateRecord(i, genome, f"layer{i}(x)", "random", None, fp, result, cache_hit)


def write_run(folder, records, elapsed, baselines=None, config=None, strategy="evolution", seed=0):
    """A run folder as the search leaves it (checkpoint, log, config.json if ``config``), written by the driver's
    own checkpointing from the given records."""
    search = LayerSearch(EvolutionConfig(strategy=strategy), None, folder, seed=seed)
    search.records, search.baselines = list(records), dict(baselines or {})
    search.next_id, search.elapsed_before = max((r.candidate_id for r in records), default=-1) + 1, elapsed
    search.checkpoint()
    (Path(folder) / "candidates.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    if config is not None:
        save_config(Path(folder) / CONFIG_FILE, config)
    return Path(folder)


def example_records():
    """7 candidates: 4 accepted (3 distinct functions), a cache hit, one rejection per stage static / quality /
    stability; per-stage seconds of the proxy on the trained ones."""
    return [
        record(0, "a", {"r": 0.8, "m": 0.6}, timings={"quality": 2.0, "stability": 1.0, "fitness": 5.0}),
        record(1, "a", {"r": 0.8, "m": 0.6}, cache_hit=True),
        record(2, "s", stage=Stage.STATIC),
        record(3, "q", {"r": 0.1}, stage=Stage.QUALITY, timings={"quality": 1.5}),
        record(4, "b", {"r": 0.9, "m": 0.9}, timings={"quality": 2.0, "fitness": 4.0}),
        record(5, "c", {"r": 0.5, "m": 0.5}, stage=Stage.STABILITY, timings={"quality": 2.0, "stability": 3.0}),
        record(6, "d", {"r": 0.95, "m": 0.3}, timings={"quality": 2.0}),
    ]


def test_report_counts_rates_and_best_first_lists(tmp_path):
    """Counts by hand: 7 candidates, 4 accepted, 3 distinct; trained = not static, not a cache hit = 5; 90 s on
    3 workers x 2 threads = 9 CPU-minutes; proxy seconds summed per stage over candidates and references."""
    from evonorm_suite.search import report

    bn = record(-1, "bn", {"r": 0.7, "m": 0.7}, timings={"quality": 1.0, "fitness": 1.0})
    folder = write_run(tmp_path / "run", example_records(), 90.0, {"bn_relu": bn}, SearchConfig(workers=3, threads=2))
    state = read_checkpoint(folder)
    counts = report.counts(state, read_run_config(folder))
    assert counts == {
        "candidates": 7, "accepted": 4, "distinct_accepted": 3,
        "rejected": {"quality": 1, "stability": 1, "static": 1}, "cache_hits": 1, "trained": 5, "elapsed_s": 90.0,
        "cpu_seconds": 540.0, "seconds_per_candidate": round(90 / 7, 3), "trained_per_cpu_minute": round(5 / 9, 2),
        "proxy_seconds_by_stage": {"fitness": 10.0, "quality": 10.5, "stability": 4.0},
    }
    assert report.cores(None) == 1 and report.cores(SearchConfig(workers=1)) == 2
    summary = report.summarize(str(folder), k=2)
    assert [t["id"] for t in summary["top"]] == [4, 0]  # best mean first, one per function
    assert summary["top2_mean"] == pytest.approx(0.8) and summary["cores"] == 6
    assert [f["id"] for f in summary["frontier"]] == [4, 6]  # (0.8, 0.6) is dominated by (0.9, 0.9)
    assert summary["top"][1]["mean_accuracy"] == 0.7 and summary["references"]["bn_relu"]["mean_accuracy"] == 0.7
    assert summary["curve"] == [[1, 0.7], [2, 0.7], [3, 0.7], [4, 0.7], [5, 0.8], [6, 0.8], [7, 0.8]]
    text = report.format_report(str(folder), k=3)
    assert "candidates 7, accepted 4 (3 distinct functions)" in text and "cache hits 1" in text
    assert "5 candidates trained, 0.56 trained per CPU-minute" in text and "on 6 core(s)" in text
    top = text.split("top 3 by mean accuracy:")[1].splitlines()[1:]
    assert [line.split()[0] for line in top[:3]] == ["#4", "#0", "#6"]
    assert all(line.endswith("(pointwise: no statistic of x)") for line in top[:3])  # sigmoid, tanh, relu
    assert top[3] == "pointwise layers (no statistic of x) among the best 3: 3"
    assert summary["pointwise_in_top5"] == 2 and summary["top"][0]["pointwise"] is True


def test_top_k_curve_mean_and_spread_of_the_best_so_far():
    """After each candidate: mean and (population) std of the ``k`` best distinct accepted layers so far; the
    candidate count at which the k-th distinct layer appeared."""
    from evonorm_suite.search import report

    records = example_records()
    xs, means, stds = report.top_k_curve(records, k=3)
    assert xs == [1, 2, 3, 4, 5, 6, 7]
    best = [0.9, 0.7, 0.625]
    mean = sum(best) / 3
    assert means[-1] == pytest.approx(mean) and means[4] == pytest.approx(0.8)
    assert stds[-1] == pytest.approx((sum((v - mean) ** 2 for v in best) / 3) ** 0.5)
    assert stds[0] == 0.0 and stds[4] == pytest.approx(0.1)
    assert [report._kth_distinct(records, k) for k in (1, 2, 3, 4)] == [1, 5, 7, None]
    assert [r.candidate_id for r in report.top_k([record(9, "x", {"r": 0.5}), record(3, "y", {"r": 0.5})], 1)] == [3]


def test_progress_line_counts_rates_and_eta():
    """The status line's numbers, by hand: 5 trained in 90 s is 3.3 per minute; the ETA is the sooner of the
    time budget (600 - 90 s) and the candidates left at the rate so far (93 * 90 / 7 s)."""
    from types import SimpleNamespace

    from evonorm_core.search import StopCondition
    from evonorm_suite.search.progress import ProgressPrinter

    records = example_records()
    printer = ProgressPrinter(StopCondition(max_candidates=100, time_budget=600.0), k=2)
    assert [r.candidate_id for r in printer.count(records[:3])] == [0]
    assert [r.candidate_id for r in printer.count(records)] == [4, 6]  # new frontier members only
    assert (printer.accepted, printer.trained) == (4, 5)  # counted once each
    search = SimpleNamespace(records=records, elapsed=lambda: 90.0, cache=SimpleNamespace(hits=1))
    line = printer.status(search)
    assert line.startswith("[7 candidates | accepted 4 | rejected quality 1 stability 1 static 1 | cache hits 1 ")
    assert "| best mean 0.900 | top-2 mean 0.800 (2) | frontier 2 | 3.3 trained/min | 1m30s elapsed" in line
    assert line.endswith("| ETA 8m30s]")  # 510 s left of the budget < 93 * 90 / 7 = 1196 s
    assert printer.eta(7, 90.0) == "8m30s"
    assert ProgressPrinter(StopCondition(max_candidates=100, time_budget=6000.0)).eta(25, 60.0) == "3m00s"
    assert ProgressPrinter(StopCondition(max_candidates=100)).eta(0, 60.0) == "until stopped"
    assert ProgressPrinter(StopCondition()).eta(5, 60.0) == "until stopped"


def test_compare_reads_each_run_at_the_budget_and_compares_over_seeds(tmp_path):
    """Fig. 10 at an equal budget of 3 candidates: each seed's top-10 mean, distinct count and best after 3 (a
    4th candidate of a reused longer run does not count); mean and sample std over seeds; BN-ReLU from the
    evolution runs; the CPU seconds of every run (its seconds times its cores; no config: 1 core); the proxy of
    each run once, in order ("not recorded" for a run without its config)."""
    def acc(i, fp, v):
        return record(i, fp, {"r": v})

    runs = {
        ("evolution", 0): [acc(0, "a", 0.5), acc(1, "b", 0.7), record(2, "z", stage=Stage.STATIC), acc(3, "c", 0.99)],
        ("evolution", 1): [acc(0, "a", 0.8), record(1, "z", stage=Stage.STATIC), acc(2, "b", 0.6)],
        ("random", 0): [record(0, "z", stage=Stage.STATIC), acc(1, "a", 0.4), record(2, "y", stage=Stage.STATIC)],
        ("random", 1): [acc(0, "a", 0.5), acc(1, "a", 0.5), record(2, "z", stage=Stage.STATIC)],
    }
    for n, ((strategy, seed), records) in enumerate(runs.items()):
        bn = record(-1, "bn", {"r": 0.55 + seed / 10 + n / 100})
        config = preset("cpu", "B") if n == 0 else None
        write_run(run_folder(tmp_path, strategy, seed), records, 10.0 * (n + 1), {"bn_relu": bn}, config,
                  strategy=strategy, seed=seed)
    result = collect(tmp_path, [0, 1], 3)
    evo, rnd = result["strategies"]["evolution"], result["strategies"]["random"]
    assert evo["top10_final"] == [0.6, 0.7] and rnd["top10_final"] == [0.4, 0.5]
    assert (evo["distinct_accepted"], evo["best_final"]) == ([2, 2], [0.7, 0.8])
    assert (rnd["distinct_accepted"], rnd["best_final"]) == ([1, 1], [0.4, 0.5])
    assert (evo["mean"], evo["std"], rnd["mean"], rnd["std"]) == (0.65, 0.0707, 0.45, 0.0707)
    assert result["verdict"] == {"evolution_minus_random": 0.2, "largest_std": 0.0707,
                                 "evolution_beats_random_by_more_than_the_spread": True}
    cores = preset("cpu", "B").workers * preset("cpu", "B").torch_threads
    assert result["bn_relu_reference"] == [0.55, 0.66] and result["cpu_seconds"] == 10.0 * cores + 20 + 30 + 40
    assert result["candidate_budget"] == 3 and result["seeds"] == [0, 1]
    assert result["proxies"] == [preset("cpu", "B").proxy.describe(), "not recorded"]
    assert result["proxies"][0].startswith("data: the embedded MNIST digits")


CALIBRATE_TINY = ["--controls", "none", "--data", "digits", "--anchors", "resnet50_cifar", "--stability-anchors",
                  "resnet50_cifar", "--stability-depth", "0.01", "--image-size", "8", "--crop-size", "8", "--batch-size",
                  "8", "--train-steps", "2", "--quality-steps", "1", "--quality-threshold", "0", "--stability-steps",
                  "1", "--stability-batch-size", "4", "--threads", "1"]


def test_calibrate_stops_on_a_signal_with_one_line_keeping_what_it_measured(tmp_path, monkeypatch, capsys):
    """SIGTERM as the third layer ends (before it is recorded): status 143, one line naming the JSON, which holds
    the two measurements made before."""
    from evonorm_suite.search import calibrate

    measured = calibrate.measure

    def measure_then_stop(evaluator, name, genome, curve):
        row = measured(evaluator, name, genome, curve)
        if name == "evonorm_b1":
            os.kill(os.getpid(), signal.SIGTERM)
        return row

    monkeypatch.setattr(calibrate, "measure", measure_then_stop)
    out = tmp_path / "calibration.json"
    assert calibrate.main(["--json", str(out), "--seeds", "0", *CALIBRATE_TINY]) == 128 + signal.SIGTERM
    assert f"stopped by SIGTERM: the 2 measurements made are in {out}; add --resume" in capsys.readouterr().err
    assert [row["layer"] for row in json.loads(out.read_text())["results"]] == ["bn_relu", "evonorm_b0"]


def test_calibrate_resumes_measuring_only_the_pairs_it_lacks_as_a_whole_run_measures_them(tmp_path, monkeypatch,
                                                                                         capsys):
    """A calibration stopped after two layers, resumed with one seed more: the two kept, the rest measured, and
    every (layer, seed) equal to an uninterrupted calibration's; other settings, a pair this command does not
    measure, or a file that is not a calibration are refused in one line."""
    from evonorm_suite.search import calibrate

    def numbers(path):
        return [{k: v for k, v in row.items() if k not in ("cpu_seconds", "timings")}
                for row in json.loads(path.read_text())["results"]]

    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    assert calibrate.main(["--json", str(whole), "--seeds", "0", "1", *CALIBRATE_TINY]) == 0
    measured, calls = calibrate.measure, []
    monkeypatch.setattr(calibrate, "measure", lambda *a: calls.append(a[1]) or measured(*a))
    assert calibrate.main(["--json", str(part), "--seeds", "0", *CALIBRATE_TINY]) == 0
    kept = json.loads(part.read_text())
    calls.clear()
    assert calibrate.main(["--json", str(part), "--seeds", "0", "1", "--resume", *CALIBRATE_TINY]) == 0
    assert calls == [row["layer"] for row in kept["results"]]  # seed 1's only
    assert "(resumed: 4 kept, 4 to measure)" in capsys.readouterr().out
    assert numbers(part) == numbers(whole)
    resumed = json.loads(part.read_text())
    assert resumed["summary"] == {**json.loads(whole.read_text())["summary"],
                                  "cpu_seconds_per_candidate": resumed["summary"]["cpu_seconds_per_candidate"]}
    assert "--resume" not in resumed["command"] and resumed["wall_seconds"] >= kept["wall_seconds"]
    for argv, says in (
            (["--seeds", "0", "1", "--train-steps", "3"], f"{part} was measured with other settings: --train-steps 2 "
                                                          "(now 3)"),
            (["--seeds", "1"], f"{part} holds bn_relu ("),
            (["--seeds", "0", "1", "--curve", "1"], "which this command does not measure as such")):
        with pytest.raises(SystemExit):
            calibrate.main(["--json", str(part), "--resume", *CALIBRATE_TINY, *argv])
        assert says in capsys.readouterr().err
    for text, says in (("[]", "is not a JSON object"),
                       (json.dumps({**kept, "results": [1]}), "holds a result that is not an object"),
                       (json.dumps({**kept, "wall_seconds": "1 h"}), "has no config object, results list or seconds"),
                       (json.dumps({**kept, "results": [{**kept["results"][0], "seed": [0]}]}),
                        "holds a result whose layer or seed is 'bn_relu' / [0]")):
        part.write_text(text)
        with pytest.raises(SystemExit):
            calibrate.main(["--json", str(part), "--seeds", "0", "--resume", *CALIBRATE_TINY])
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        calibrate.main(["--json", str(tmp_path / "absent.json"), "--resume", *CALIBRATE_TINY])
    assert "no calibration at" in capsys.readouterr().err


def test_compare_refuses_a_started_search_of_other_settings(tmp_path):
    """A cell folder holding a search started with other flags (another --mode, or the other strategy's search
    copied in) is refused naming the folder and the option, not reused as this comparison's."""
    folder = run_folder(tmp_path, "evolution", 0)
    argv = fresh_argv(folder, "evolution", 0, 3, ["--anchors", "resnet50_cifar"])
    open_run(folder, RUN_KIND, evolve.resolve_config(evolve.build_parser().parse_args(argv))).close()
    check_started_run(folder, "evolution", 0, 5, ["--anchors", "resnet50_cifar"])  # a longer budget: continued
    with pytest.raises(ConfigError, match=rf"{folder} holds a search of other settings .*--mode cannot change"):
        check_started_run(folder, "evolution", 0, 3, ["--anchors", "resnet50_cifar", "--mode", "S"])
    with pytest.raises(ConfigError, match="--strategy cannot change"):
        check_started_run(folder, "random", 0, 3, ["--anchors", "resnet50_cifar"])


def test_compare_runs_each_strategy_and_seed_as_a_grid_cell_that_resumes_once_started(tmp_path):
    """Fig. 10's runs: a fresh search from random graphs with the given flags (which win), or the started one resumed
    with the same flags (evolve.py's --resume keeps the run's settings and applies --workers); a run is finished once
    it has evaluated the budget (a longer budget continues it)."""
    cell = run_cell(tmp_path, "random", 3, 2, ["--mode", "S"])
    folder = run_folder(tmp_path, "random", 3)
    assert cell.id == "random_seed3" and cell.commands[0][1:3] == ("-m", "evonorm_suite.search.evolve")
    assert cell.commands[0][3:] == ("--no-population-from-references", "--mode", "S", "--strategy", "random", "--seed", "3", "--max-candidates", "2",
                                    "--time-budget", "none", "--output-dir", str(folder))
    assert not cell.finished()
    open_run(folder, RUN_KIND, evolve.resolve_config(evolve.build_parser().parse_args(cell.commands[0][3:]))).close()
    write_run(folder, [record(0, "a", {"r": 0.5}), record(1, "b", {"r": 0.6})], 1.0, strategy="random", seed=3)
    started = run_cell(tmp_path, "random", 3, 2, ["--mode", "S", "--workers", "1"])
    assert started.commands[0][3:] == ("--no-population-from-references", "--mode", "S", "--workers", "1", "--strategy",
                                       "random", "--seed", "3", "--max-candidates", "2", "--time-budget", "none",
                                       "--output-dir", str(folder), "--resume")
    resumed = evolve.resolve_config(evolve.build_parser().parse_args(started.commands[0][3:]))
    assert (resumed.workers, resumed.evolution.mode, resumed.max_candidates) == (1, "S", 2)  # the run's own mode
    assert started.finished() and not run_cell(tmp_path, "random", 3, 3, []).finished()


def test_compare_names_a_run_file_damaged_after_the_searches_finished(tmp_path, monkeypatch, capsys):
    from evonorm_core.experiment.grid import GridResult
    from evonorm_suite.search import compare

    monkeypatch.setattr(compare, "run_grid", lambda *args, **kwargs: GridResult())  # every search finished
    (tmp_path / "evolution_seed0").mkdir()
    (tmp_path / "evolution_seed0" / "checkpoint.json").write_text("[]")
    with pytest.raises(SystemExit):
        compare.main(["--max-candidates", "2", "--seeds", "0", "--output-dir", str(tmp_path)])
    assert f"search checkpoint '{tmp_path / 'evolution_seed0' / 'checkpoint.json'}' is not a JSON object" in \
        capsys.readouterr().err


def test_rerank_takes_the_top_layers_then_the_references_with_longer_training(tmp_path):
    """Paper section 5.2 / Appendix C: the top layers retrained longer (default 4x the search's steps) on the
    90/10 split, with no rejection stage; the references follow the top layers."""
    from evonorm_suite.search.rerank import candidates, rerank_proxy

    proxy = preset("cpu", "B").proxy
    longer = rerank_proxy(proxy, None)
    assert (longer.train_steps, longer.quality_steps, longer.quality_threshold, longer.stability_steps,
            longer.holdout) == (400, 0, 0.0, 0, True)
    assert (longer.lr, longer.batch_size, longer.anchors, longer.crop_size) == (
        proxy.lr, proxy.batch_size, proxy.anchors, proxy.crop_size)
    assert rerank_proxy(proxy, 50).train_steps == 50
    bn = record(-1, "bn", {"r": 0.7, "m": 0.7})
    state = read_checkpoint(write_run(tmp_path / "run", example_records(), 9.0, {"bn_relu": bn}))
    assert list(candidates(state, 2, True)) == ["#4", "#0", "bn_relu"]
    assert list(candidates(state, 10, False)) == ["#4", "#0", "#6"]
    assert candidates(state, 1, False)["#4"] == {"expression": "layer4(x)", "genome": parse("sigmoid(x)").to_dict(),
                                                 "search_accuracy": 0.9}


def test_a_reference_layer_found_again_is_labelled_and_reranked_once_as_the_reference(tmp_path):
    """A candidate that is a reference's layer is that reference found again: the report says so, the summary
    names it, and the rerank takes the next new layer instead of training the reference twice."""
    from evonorm_suite.search import report
    from evonorm_suite.search.rerank import candidates

    found_again = record(7, "bn", {"r": 0.99, "m": 0.99})
    bn = record(-1, "bn", {"r": 0.7, "m": 0.7})
    folder = write_run(tmp_path / "run", [*example_records(), found_again], 9.0, {"bn_relu": bn})
    state = read_checkpoint(folder)
    assert list(candidates(state, 2, True)) == ["#4", "#0", "bn_relu"]
    assert list(candidates(state, 2, False)) == ["#7", "#4"]
    top = report.format_report(str(folder), k=2).split("top 2 by mean accuracy:")[1].splitlines()[1:]
    assert top[0].split()[0] == "#7" and top[0].endswith("(= bn_relu)") and "(=" not in top[1]
    assert [t["same_as"] for t in report.summarize(str(folder), k=2)["top"]] == ["bn_relu", None]


@pytest.mark.parametrize("line, says", [
    ('[1, 2]', "no layer name and seed"), ('{"name": "x", "train_steps": 4}', "no layer name and seed"),
    ('{"name": "x", "seed": 0, "train_steps": 4}', "'result'"),
    ('{"name": "x", "seed": 0, "train_steps": 4, "result": {"status": "rejected", "stage": "nan_loss"}}',
     "unknown stage 'nan_loss'")])
def test_a_rerank_log_line_that_is_not_a_result_is_named(tmp_path, line, says):
    from evonorm_suite.search.rerank import read_rerank_log

    good = {"name": "bn_relu", "seed": 0, "train_steps": 4, "result": CandidateResult.accept({"a": 0.5}).to_dict()}
    log = tmp_path / "rerank.jsonl"
    log.write_text(json.dumps(good) + "\n")
    assert read_rerank_log(log) == [good] and read_rerank_log(tmp_path / "absent.jsonl") == []
    log.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(CorruptFileError, match=rf"rerank log '{log}', line 2: not a rerank result \(.*{re.escape(says)}"):
        read_rerank_log(log)


def test_rerank_ranking_leaves_failed_seeds_out_and_layers_without_a_result_last():
    anchors = ("a", "b")

    def row(name, seed, accs, stage=None):
        result = CandidateResult.accept(accs) if stage is None else CandidateResult.reject(stage, "nan", accs)
        return {"name": name, "seed": seed, "result": result.to_dict()}

    results = [row("#1", 0, {"a": 0.6, "b": 0.4}), row("#1", 1, {"a": 0.9}, Stage.FITNESS),
               row("#2", 0, {"a": 0.2}, Stage.CRASH), row("#3", 0, {"a": 0.7, "b": 0.7}),
               row("#3", 1, {"a": 0.5, "b": 0.5})]
    chosen = {name: {"expression": name, "genome": {}} for name in ("#2", "#1", "#3")}
    rows = rank(chosen, results, anchors)
    assert [r["name"] for r in rows] == ["#3", "#1", "#2"]
    assert rows[1]["mean"] == 0.5 and rows[1]["std"] is None and rows[1]["failed"] == ["seed 1: fitness: nan"]
    assert rows[0]["std"] == round(0.02 ** 0.5, 4) and rows[0]["anchors"]["b"]["values"] == [0.7, 0.5]
    assert rows[2]["mean"] is None and rows[2]["anchors"] == {} and rows[2]["seeds"] == [0]
    assert not any("at_least_bn_relu_on_every_anchor" in r for r in rows)  # no BN-ReLU reranked


def test_calibration_summary_by_hand():
    from evonorm_suite.search.calibrate import summarize as calibration_summary

    def row(layer, seed, accs, stage=None, cpu=1.0):
        mean = round(sum(accs.values()) / len(accs), 4) if accs else None
        return {"layer": layer, "seed": seed, "status": "accepted" if stage is None else "rejected", "stage": stage,
                "reason": "low" if stage else "", "accuracies": accs, "mean_accuracy": mean, "cpu_seconds": cpu}

    rows = [row("bn_relu", 0, {"a": 0.5, "b": 0.7}, cpu=2.0), row("bn_relu", 1, {"a": 0.9, "b": 0.7}, cpu=4.0),
            row("bn_relu", 2, {"a": 0.1}, "quality", cpu=3.0), row("random0", 0, {"a": 0.3, "b": 0.3}),
            row("random1", 0, {"a": 0.1}, "quality"), row("random2", 0, {}, "stability", cpu=4.0)]
    summary = calibration_summary(rows, ["bn_relu"], [], 0.1)
    assert summary["layers"]["bn_relu"] == {
        "accepted_seeds": 2, "seeds": 3, "mean": 0.7, "std": round(0.02 ** 0.5, 4), "min_anchor_accuracy": 0.5,
        "rejections": ["seed 2: quality: low"], "rejected_by": ["quality"]}
    assert summary["random"] == {"evaluated": 3, "outcomes": {"accepted": 1, "quality": 1, "stability": 1},
                                 "accepted_fraction": 0.333}
    assert summary["cpu_seconds_per_candidate"] == {"named": 3.0, "random": 2.0}


def test_rank_agreement_is_kendalls_tau_b_over_the_layers_with_both_numbers():
    """+1 when the search's order is the rerank's, -1 when reversed; a layer the search rejected (no accuracy)
    or that failed every rerank seed is left out; tau-b counts ties (scipy's kendalltau)."""
    from evonorm_suite.search.rerank import rank_agreement

    def layers(search):
        return {name: {"search_accuracy": value} for name, value in search.items()}

    ranked = [{"name": n, "mean": m} for n, m in (("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", None))]
    same = rank_agreement(layers({"a": 0.5, "b": 0.4, "c": 0.3, "d": None, "e": 0.1}), ranked)
    assert same == {"layers": 3, "kendall_tau_b": 1.0, "p_value": pytest.approx(0.333, abs=1e-4)}
    many = rank_agreement(layers({"a": 0.0, "b": 0.1, "c": 0.2, "d": 0.3, "e": None}), ranked)
    assert many["kendall_tau_b"] == -1.0 and many["p_value"] == pytest.approx(0.0833, abs=1e-4)
    reversed_ = rank_agreement(layers({"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4, "e": 0.5}), ranked)
    assert (reversed_["layers"], reversed_["kendall_tau_b"]) == (4, -1.0)
    # one discordant pair of 6 (b and c swapped): (5 - 1) / 6
    swapped = rank_agreement(layers({"a": 0.9, "b": 0.7, "c": 0.8, "d": 0.6, "e": None}), ranked)
    assert swapped["kendall_tau_b"] == pytest.approx(round(4 / 6, 3))
    assert rank_agreement(layers({"a": 0.5, "b": None, "c": None, "d": None, "e": None}), ranked)["kendall_tau_b"] is None


def test_calibration_says_whether_the_proxy_discriminates():
    """References accepted on every seed, every control rejected on every seed or >= margin below the baseline's
    mean, the unstable example rejected on every seed and by the stability test alone on every seed."""
    from evonorm_suite.search.calibrate import summarize

    def row(layer, seed, accs=None, stage=None):
        return {"layer": layer, "seed": seed, "status": "accepted" if stage is None else "rejected",
                "stage": stage, "reason": "" if stage is None else "why", "accuracies": accs or {},
                "mean_accuracy": None if accs is None else sum(accs.values()) / len(accs), "cpu_seconds": 1.0}

    rows = [row("bn_relu", s, {"r": 0.8, "m": 0.7}) for s in (0, 1)]
    rows += [row("no_norm_tanh", 0, {"r": 0.64, "m": 0.64}), row("no_norm_tanh", 1, stage="quality")]
    rows += [{**row("unstable_example", s, {"r": 0.3}, stage="stability"), "stability_alone": "inf"} for s in (0, 1)]
    checks = summarize(rows, ["bn_relu"], ["no_norm_tanh", "unstable_example"], 0.10)["discrimination"]
    assert checks["baseline_mean"] == pytest.approx(0.75)
    assert checks["references_accepted"] and checks["controls_apart"] == {"no_norm_tanh": True, "unstable_example": True}
    assert checks["unstable_rejected_by_stability"] and checks["discriminates"]
    close = [*rows[:2], row("no_norm_tanh", 0, {"r": 0.66, "m": 0.66}), rows[3], *rows[4:]]  # 0.09 below: too close
    checks = summarize(close, ["bn_relu"], ["no_norm_tanh", "unstable_example"], 0.10)["discrimination"]
    assert checks["controls_apart"]["no_norm_tanh"] is False and not checks["discriminates"]
    by_quality = [*rows[:4], {**row("unstable_example", 0, stage="quality"), "stability_alone": "inf"}, rows[5]]
    checks = summarize(by_quality, ["bn_relu"], ["no_norm_tanh", "unstable_example"], 0.10)["discrimination"]
    assert checks["unstable_rejected_by_stability"] and checks["discriminates"]  # quality first, stability also
    passes = [*rows[:4], {**rows[4], "stability_alone": None}, rows[5]]
    checks = summarize(passes, ["bn_relu"], ["no_norm_tanh", "unstable_example"], 0.10)["discrimination"]
    assert checks["unstable_rejected_by_stability"] is False and not checks["discriminates"]
    lost = [row("bn_relu", 0, {"r": 0.8}), row("bn_relu", 1, stage="quality"), *rows[2:]]
    assert not summarize(lost, ["bn_relu"], ["no_norm_tanh", "unstable_example"], 0.1)["discrimination"][
        "references_accepted"]
    # mode S: BN-ReLU is measured beside the references and stays the baseline; it need not be accepted itself
    gn = [row("gn_relu", s, {"r": 0.9, "m": 0.9}) for s in (0, 1)]
    checks = summarize([*gn, *rows[:4]], ["gn_relu"], ["no_norm_tanh"], 0.1)["discrimination"]
    assert (checks["baseline"], checks["baseline_mean"]) == ("bn_relu", pytest.approx(0.75))
    assert checks["references_accepted"] and checks["controls_apart"] == {"no_norm_tanh": True}
    assert "discrimination" not in summarize([*gn, *rows[2:4]], ["gn_relu"], ["no_norm_tanh"], 0.1)  # no BN-ReLU


def test_the_papers_proxy_without_its_data_says_how_to_get_it():
    from evonorm_suite.search.proxy import ProxyConfig, ProxyEvaluator

    with pytest.raises(FileNotFoundError, match=r"needs --data-dir.*cifar-10-python\.tar\.gz.*--data mnist"):
        ProxyEvaluator(ProxyConfig()).data()
