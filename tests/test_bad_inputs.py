"""Bad inputs found by tools/probe_bad_inputs.py, one test per class of failure that was fixed,
plus kill -9 + resume of classification, malicious checkpoints at the command line, and the
probe itself on the layer API and the formula parser.

Tests already elsewhere (not repeated): layers' dtypes/eps/empty batches/register override
(test_layers_bad_inputs.py), run folders and locks and JSONL/checkpoint readers
(test_experiment.py), the search's flags, folders, damaged files, workers and kill -9
(test_search_runs.py, test_search_e2e.py), GAN flags, folders and kill -9
(test_gan_training.py), malicious YAML and detection output folders (test_detection_train.py).
"""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from evonorm_core.experiment.files import CorruptFileError, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CLS_TINY = ["--model", "mobilenetv2_cifar", "--norm-act", "evonorm_s0", "--image-size", "8", "--train-subset", "16",
            "--batch-size", "16", "--warmup-epochs", "0", "--no-progress"]


def evil_checkpoint(path: Path, marker: Path) -> None:
    """A checkpoint that creates ``marker`` if it is ever unpickled with ``weights_only=False``."""
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": Evil(), "step": 1, "config": Evil()}, path)


# ----------------------------------------------------------------------------- classification
@pytest.fixture
def classification_run(tmp_path, one_thread):
    from evonorm_suite.classification import train
    assert train.main([*CLS_TINY, "--epochs", "2", "--max-steps", "1", "--output-dir", str(tmp_path / "run")]) == 0
    return tmp_path / "run"


def test_a_moved_classification_run_resumes_where_it_lies(classification_run, tmp_path):
    from evonorm_suite.classification import train
    moved = tmp_path / "moved"
    shutil.move(classification_run, moved)
    assert train.main(["--resume", "--output-dir", str(moved), "--max-steps", "2"]) == 0
    assert load_checkpoint(moved / "checkpoint.pt")["step"] == 2
    assert json.loads((moved / "config.json").read_text())["output_dir"] == str(moved)


def test_classification_refuses_a_checkpoint_that_would_run_code(classification_run, tmp_path):
    from evonorm_suite.classification import train
    marker = tmp_path / "pwned"
    evil_checkpoint(classification_run / "checkpoint.pt", marker)
    with pytest.raises(SystemExit, match=r"checkpoint.pt' holds Python objects .* refused"):
        train.main(["--resume", "--output-dir", str(classification_run), "--max-steps", "2"])
    assert not marker.exists()


def test_a_layer_option_that_does_not_fit_the_model_is_a_clear_error(tmp_path, capsys):
    from evonorm_suite.classification import train
    with pytest.raises(SystemExit, match=r"--groups 3: num_channels=16 is not divisible by groups=3"):
        train.main([*CLS_TINY, "--groups", "3", "--output-dir", str(tmp_path / "run")])


@pytest.mark.parametrize("content", ['{"final_top1": ', '{"final_top1": 50.0}', "[1, 2]"])
def test_tables_and_tradeoff_name_a_damaged_result_json(tmp_path, content):
    from evonorm_suite.classification import tables, tradeoff
    cell = tmp_path / "t3" / "resnet50" / "bn_relu" / "seed0"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(content)
    with pytest.raises(SystemExit, match=r"error: run result '.*result.json'"):
        tables.main(["report", "table3", str(tmp_path / "t3")])
    point = tmp_path / "fig11" / "bn_relu" / "w1.0"
    point.mkdir(parents=True)
    (point / "result.json").write_text(content)
    with pytest.raises(SystemExit, match=r"error: run result '.*result.json'"):
        tradeoff.main(["plot", str(tmp_path / "fig11"), "--resolution", "32"])


@pytest.mark.slow
def test_classification_kill_and_resume_is_the_uninterrupted_run(tmp_path, one_thread):
    """kill -9 mid-run, then --resume: the resumed run ends with the weights of a run never
    interrupted (checkpoints are atomic, so the last one is whole)."""
    from evonorm_suite.classification import train
    args = [*CLS_TINY, "--epochs", "300", "--schedule", "constant"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "evonorm_suite.classification.train", *args, "--output-dir", str(killed)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if load_checkpoint(checkpoint)["step"] >= 3:
                break
        except (FileNotFoundError, CorruptFileError):
            pass
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = load_checkpoint(checkpoint)["step"]
    assert 3 <= killed_at < 300
    steps = str(killed_at + 2)
    done = subprocess.run([sys.executable, "-m", "evonorm_suite.classification.train", "--resume", "--output-dir", str(killed),
                           "--max-steps", steps], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed {checkpoint} at epoch {killed_at}, step {killed_at}" in done.stdout
    assert train.main([*args, "--max-steps", steps, "--output-dir", str(tmp_path / "whole")]) == 0
    resumed, whole = load_checkpoint(checkpoint), load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    assert resumed["step"] == whole["step"] == killed_at + 2
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name


# ----------------------------------------------------------------------------- GAN
def test_gan_evaluate_names_a_checkpoint_whose_weights_do_not_fit(tmp_path):
    from evonorm_suite.gan import evaluate, train_biggan
    run = tmp_path / "run"
    assert train_biggan.main(["--norm", "evonorm_b0", "--channels", "8", "--dim-z", "8", "--shared-dim", "8",
                              "--depth", "1", "--batch-size", "8", "--micro-batch", "8", "--total-steps", "1",
                              "--eval-every", "0", "--sample-every", "1000", "--threads", "1",
                              "--run-dir", str(run)]) == 0
    path = run / "seed0" / "checkpoints" / "last.pt"
    state = torch.load(path, weights_only=True)
    state["G_ema"] = {k: v[:1] if v.dim() else v for k, v in state["G_ema"].items()}
    torch.save(state, path)
    with pytest.raises(SystemExit, match=r"last.pt' does not fit its own configuration"):
        evaluate.main([str(run / "seed0"), "--num-samples", "16", "--standing-stats", "0"])


# ----------------------------------------------------------------------------- search
def test_compare_does_not_read_seed_as_seeds(tmp_path, capsys):
    from evonorm_suite.search import compare
    with pytest.raises(SystemExit):
        compare.main(["--max-candidates", "2", "--seed", "3", "--output-dir", str(tmp_path)])
    assert "--seed is set by this program for each run" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- detection
@pytest.fixture
def detection_env(tmp_path, monkeypatch):
    pytest.importorskip("detectron2")
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path / "datasets"))
    return ROOT / "detection" / "configs" / "demo_shapes_gn.yaml"


def test_detection_refuses_pickled_weights_before_loading_them(tmp_path, detection_env):
    from evonorm_suite.detection import train_net

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    marker = tmp_path / "pwned"
    pkl, pth = tmp_path / "zoo.pkl", tmp_path / "weights.pth"
    pkl.write_bytes(pickle.dumps({"model": Evil(), "__author__": "zoo"}))
    evil_checkpoint(pth, marker)
    truncated = tmp_path / "cut.pth"
    truncated.write_bytes(b"PK\x03\x04")
    for path, message in ((pkl, "is a Python pickle"), (pth, "holds Python objects"), (truncated, "is truncated")):
        with pytest.raises(SystemExit) as exit_info:
            train_net.main(["--config", str(detection_env), "--eval-only", "OUTPUT_DIR", str(tmp_path / "out"),
                            "MODEL.WEIGHTS", str(path)])
        assert message in str(exit_info.value.code) and str(path) in str(exit_info.value.code)
    assert not marker.exists() and not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="--num-gpus"):
        train_net.main(["--config", str(detection_env), "--num-gpus", "0"])


def test_detection_checkpoints_are_written_atomically_and_read_safely(tmp_path, detection_env):
    from torch import nn

    from evonorm_suite.detection.checkpoint import SafeCheckpointer, UnsafeWeightsError
    model = nn.Linear(3, 2)
    SafeCheckpointer(model, save_dir=str(tmp_path)).save("model_0000001", iteration=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last_checkpoint", "model_0000001.pth"]
    assert (tmp_path / "last_checkpoint").read_text() == "model_0000001.pth"
    other = nn.Linear(3, 2)
    extra = SafeCheckpointer(other, save_dir=str(tmp_path)).resume_or_load("", resume=True)
    assert extra["iteration"] == 1 and torch.equal(other.weight, model.weight)
    (tmp_path / "zoo.pkl").write_bytes(pickle.dumps({"model": {}}))
    with pytest.raises(UnsafeWeightsError, match="zoo.pkl"):
        SafeCheckpointer(other).load(str(tmp_path / "zoo.pkl"))


# ----------------------------------------------------------------------------- the probe itself
def test_probe_of_the_layer_api_and_the_parser_finds_nothing(tmp_path):
    done = subprocess.run([sys.executable, "tools/probe_bad_inputs.py", "--only", "layers", "parser",
                           "--json", str(tmp_path / "probe.json")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "probe.json").read_text())
    assert len(result["probes"]) >= 40 and result["counts"]["TRACEBACK"] == 0
    assert all(line.count("->") == 1 for line in done.stdout.splitlines()[:-1])
