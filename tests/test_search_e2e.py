"""``search/evolve.py`` end to end on the real anchors and digits proxy, tiny settings:
local backend, Ray backend (``ray.init(num_cpus=2)``), and kill-and-resume."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from evonorm_core.search import CandidateRecord, CandidateResult, Stage, fingerprint, parse
from evonorm_suite.search import evolve, report, rerank

REPO = Path(__file__).resolve().parents[1]
TINY = ["--data", "digits", "--anchors", "resnet50_cifar", "--stability-anchors", "resnet50_cifar",
        "--stability-depth", "0.01", "--image-size", "8", "--crop-size", "8", "--batch-size", "8",
        "--train-steps", "2", "--quality-steps", "1", "--quality-threshold", "0", "--stability-steps", "1",
        "--stability-batch-size", "4", "--initial-population", "1", "--mode", "S", "--threads", "1"]


def records(output_dir):
    return [json.loads(line) for line in (Path(output_dir) / "candidates.jsonl").read_text().splitlines()]


def comparable(rows):
    return [{k: v for k, v in r.items() if k not in ("wall_time", "elapsed", "timings")} for r in rows]


def test_local_search_runs_reports_and_plots(tmp_path, capsys):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--workers", "1", "--max-candidates", "4", "--references", "evonorm_s0",
                               "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the embedded sklearn 8x8 digits" in printed and "Pareto frontier" in printed and "evonorm_s0" in printed
    assert "trained per CPU-minute" in printed
    rows = records(out)
    assert len(rows) == 4 and {"expression", "accuracies", "stage", "cache_hit", "wall_time"} <= set(rows[0])
    assert (out / "progress.png").stat().st_size > 1000
    assert report.main([str(out), "--plot", str(tmp_path / "p.png")]) == 0 and (tmp_path / "p.png").exists()


@pytest.mark.forks_autograd
def test_rerank_stops_on_sigterm_or_a_dead_worker_with_one_line(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--workers", "1", "--max-candidates", "2", "--references", "evonorm_s0",
                               "--output-dir", str(out)]) == 0
    other = tmp_path / "copy"  # the stopped rerank's workers hold the first folder's lock until they end
    shutil.copytree(out, other)
    argv = [str(out), "--top", "1", "--seeds", "0", "--train-steps", "1", "--workers", "1", "--threads", "1"]

    def terminated(running):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        return iter(())

    monkeypatch.setattr(rerank.futures, "as_completed", terminated)
    capsys.readouterr()
    assert rerank.main(argv) == 128 + signal.SIGTERM
    assert f"stopped by SIGTERM; finished results are in {out / 'rerank.jsonl'}" in capsys.readouterr().out

    def worker_died(running):
        raise rerank.futures.process.BrokenProcessPool("A process in the process pool was terminated abruptly")

    monkeypatch.setattr(rerank.futures, "as_completed", worker_died)
    assert rerank.main([str(other), *argv[1:]]) == 1
    assert "error: a training worker died (killed, or out of memory)" in capsys.readouterr().err


def test_a_search_stopped_before_its_first_checkpoint_resumes_by_starting(tmp_path, capsys):
    """Ctrl-C while the workers start leaves run.json and config.json but no checkpoint: one line, status 130, and
    --resume starts the search with the saved settings (the folder was refused both with and without --resume)."""
    out = tmp_path / "run"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evolve, "make_executor", interrupted)
        assert evolve.main(TINY + ["--workers", "1", "--max-candidates", "2", "--references", "none",
                                   "--output-dir", str(out)]) == 130
    assert "stopped by SIGINT before the search began; add --resume" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == ["config.json", "run.json"]
    assert evolve.main(["--output-dir", str(out), "--resume"]) == 0
    assert len(records(out)) == 2 and (out / "checkpoint.json").is_file()


@pytest.mark.forks_autograd
def test_rerank_retrains_the_top_layers_over_seeds_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert evolve.main(TINY + ["--workers", "1", "--max-candidates", "6", "--references", "evonorm_s0",
                               "--quality-threshold", "0", "--output-dir", str(out)]) == 0
    argv = [str(out), "--top", "2", "--seeds", "0", "1", "--train-steps", "3", "--workers", "1", "--threads", "1"]
    assert rerank.main(argv) == 0
    ranking = json.loads((out / "rerank.json").read_text())
    assert ranking["command"] == "python search/rerank.py " + " ".join(argv)
    assert ranking["train_steps"] == 3 and ranking["seeds"] == [0, 1]
    rows = ranking["ranking"]
    assert "evonorm_s0" in {r["name"] for r in rows} and len(rows) <= 3
    assert all(r["seeds"] == [0, 1] and not r["failed"] for r in rows)
    for r in rows:  # the mean over seeds of the anchors' mean
        values = r["anchors"]["resnet50_cifar"]["values"]
        assert r["mean"] == pytest.approx(sum(values) / 2, abs=1e-4)
    assert [r["mean"] for r in rows] == sorted((r["mean"] for r in rows), reverse=True)
    trained = (out / "rerank.jsonl").read_text()
    assert rerank.main(argv) == 0 and (out / "rerank.jsonl").read_text() == trained  # nothing retrained
    assert "reranked by mean held-out accuracy" in capsys.readouterr().out


def test_ray_backend(tmp_path):
    ray = pytest.importorskip("ray")
    out = tmp_path / "ray"
    try:
        assert evolve.main(TINY + ["--backend", "ray", "--workers", "2", "--max-candidates", "3",
                                   "--references", "none", "--output-dir", str(out)]) == 0
        assert ray.cluster_resources().get("CPU") == 2
    finally:
        ray.shutdown()
    assert len(records(out)) == 3


def test_bad_arguments_are_clear_errors(tmp_path, capsys):
    for argv, message in ((["--data", "cifar10"], "--data cifar10 (the paper's proxy) needs --data-dir"),
                          (["--preset", "paper"], "cifar-10-python.tar.gz) from https://www.cs.toronto.edu/~kriz/cifar.html"),
                          (["--data", "cifar10", "--data-dir", str(tmp_path)], "cifar-10"),
                          (["--anchors", "vgg"], "--anchors must be one of resnet50_cifar"),
                          (["--references", "bn"], "--references must be one of bn_relu"),
                          (["--resume", "--output-dir", str(tmp_path / "none")], "no run of search/evolve.py in")):
        with pytest.raises(SystemExit):
            evolve.main(argv)
        assert message in capsys.readouterr().err


@pytest.mark.slow
def test_kill_and_resume_gives_the_uninterrupted_result(tmp_path):
    args = TINY + ["--workers", "1", "--max-candidates", "8", "--references", "none", "--seed", "5"]
    evolve.main(args + ["--output-dir", str(tmp_path / "whole")])
    killed = tmp_path / "killed"
    command = [sys.executable, str(REPO / "search" / "evolve.py"), *args, "--output-dir", str(killed)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = killed / "candidates.jsonl"
    deadline = time.monotonic() + 300
    while not (log.exists() and len(log.read_text().splitlines()) >= 3) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(records(killed))
    assert 3 <= done_before < 8
    subprocess.run(command + ["--resume"], cwd=REPO, check=True, stdout=subprocess.DEVNULL, timeout=600)
    assert comparable(records(killed)) == comparable(records(tmp_path / "whole"))


def test_report_counts_each_layer_once():
    """#1 is #0's layer (``tanh(v1 * x)`` starts as ``tanh(x)``): counted once."""
    def row(i, expression, accs, accepted=True):
        result = (CandidateResult.accept if accepted else partial(CandidateResult.reject, Stage.QUALITY, "low"))(
            dict(zip("ab", accs)))
        genome = parse(expression)
        return CandidateRecord(i, genome.to_dict(), expression, "random", None, fingerprint(genome), result)
    rows = [row(0, "tanh(x)", (0.9, 0.8)), row(1, "tanh(v1 * x)", (0.9, 0.8)), row(2, "sigmoid(x)", (0.5, 0.4)),
            row(3, "abs(x)", (0.1, 0.1), False)]
    assert [r.candidate_id for r in report.top_k(rows, 2)] == [0, 2]
    assert [r.candidate_id for r in report.frontier(rows)] == [0]
    xs, means, _ = report.top_k_curve(rows, k=2)
    assert xs == [1, 2, 3, 4] and means == pytest.approx([0.85, 0.85, 0.65, 0.65])
