"""A diverged run, SIGINT/SIGTERM and a full disk end a training command with one line, no traceback and a
resumable state (evonorm_core.experiment.stopping; docs/reliability.md, "Divergence, signals, a full disk")."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from evonorm_core.classifiers.trainer import Trainer
from evonorm_core.experiment import files
from evonorm_core.experiment.files import DiskFullError, load_checkpoint
from evonorm_core.experiment.rundir import RunDir
from evonorm_core.experiment.stopping import (
    EXIT_DIVERGED,
    Diverged,
    StopCleanly,
    divergence_step,
    stop_signals_after_block,
)
from evonorm_suite.classification import train
from evonorm_suite.gan import train_biggan

ROOT = Path(__file__).resolve().parents[1]
GAN_TINY = ["--norm", "evonorm_s0", "--channels", "8", "--dim-z", "8", "--shared-dim", "8", "--depth", "1",
            "--batch-size", "8", "--micro-batch", "8", "--eval-every", "0", "--sample-every", "100000", "--threads", "1"]
CLS_TINY = ["--model", "mobilenetv2_cifar", "--image-size", "8", "--train-subset", "16", "--batch-size", "16",
            "--warmup-epochs", "0", "--no-progress"]


def stop(run_dir: Path | None = None) -> StopCleanly:
    return StopCleanly("python prog.py", "a lower --lr", "python prog.py --resume", run_dir)


def test_a_divergence_is_one_line_a_record_and_exit_status_3(tmp_path, capsys):
    with RunDir(tmp_path / "run"):
        pass
    with pytest.raises(SystemExit) as info, stop(tmp_path / "run"):
        raise Diverged(12, {"loss": float("nan")})
    assert info.value.code == EXIT_DIVERGED == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python prog.py: the run diverged: non-finite loss at step 12 (loss nan). Try a new run "
                           "with a lower --lr. Recorded in ")
    record = json.loads((tmp_path / "run" / "diverged.json").read_text())
    assert record == {"diverged": True, "step": 12, "error": "non-finite loss at step 12 (loss nan)",
                      "advice": "try a new run with a lower --lr"}
    assert divergence_step(FloatingPointError("loss became nan at step 4 (evonorm_b0, m)")) == 4


def test_a_divergence_in_a_folder_another_process_holds_is_not_recorded_there(tmp_path, capsys):
    with RunDir(tmp_path / "run"), pytest.raises(SystemExit), stop(tmp_path / "run"):
        raise FloatingPointError("non-finite loss at step 3")
    assert "could not be recorded in" in capsys.readouterr().err and not (tmp_path / "run" / "diverged.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_are_one_line_and_128_plus_the_signal(signum, capsys):
    before = signal.getsignal(signum)
    with pytest.raises(SystemExit) as info, stop():
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises before this ends
    assert info.value.code == 128 + signum
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"python prog.py: stopped by {signal.Signals(signum).name}; the run resumes from its last "
                    "checkpoint with: python prog.py --resume")
    assert signal.getsignal(signum) is before


def test_a_stop_signal_inside_a_held_block_ends_it_first_then_stops(capsys):
    """stop_signals_after_block: the block runs to its end (a training step is not cut in half); the signal
    then reaches the handlers around it, StopCleanly's here; one that is ignored outside stays ignored."""
    finished = []
    with pytest.raises(SystemExit) as info, stop():
        with stop_signals_after_block():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)  # the first one counts
            finished.append(True)
        finished.append("after")
    assert finished == [True] and info.value.code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with stop_signals_after_block():
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_full_disk_is_one_line_and_other_errors_pass_through(tmp_path, capsys):
    with pytest.raises(SystemExit) as info, stop():
        raise DiskFullError(tmp_path / "last.pt", OSError(errno.ENOSPC, "full"))
    assert info.value.code == 1 and capsys.readouterr().err.startswith("python prog.py: error: no space left to write")
    with pytest.raises(KeyError), stop():
        raise KeyError("not ours")


def test_a_diverging_gan_stops_with_one_line_naming_the_step_and_what_to_try(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        train_biggan.main([*GAN_TINY, "--total-steps", "20", "--g-lr", "1e30", "--d-lr", "1e30",
                           "--run-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == EXIT_DIVERGED and "Traceback" not in err
    (line,) = err.splitlines()
    assert "python gan/train_biggan.py: the run diverged: non-finite loss at step 1" in line
    assert "Try a new run with lower learning rates (--g-lr, --d-lr)" in line
    assert json.loads((tmp_path / "seed0" / "diverged.json").read_text())["step"] == 1


def test_a_diverging_classifier_stops_with_one_line_naming_the_step(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        train.main([*CLS_TINY, "--norm-act", "evonorm_b0", "--epochs", "50", "--base-lr", "1e12", "--output-dir",
                    str(tmp_path / "run")])
    assert info.value.code == EXIT_DIVERGED
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    record = json.loads((tmp_path / "run" / "diverged.json").read_text())
    assert line.startswith(f"python classification/train.py: the run diverged: loss became nan at step {record['step']}")
    assert "Try a new run with a lower learning rate (--base-lr)" in line


def test_a_full_disk_during_gan_training_is_one_line(tmp_path, capsys, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(SystemExit) as info:
        train_biggan.main([*GAN_TINY, "--total-steps", "1", "--run-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python gan/train_biggan.py: error: no space left to write")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_gan_run_stops_with_one_line_and_resumes(signum, tmp_path, capsys):
    """A real process: once it has saved a checkpoint it gets the signal, ends with exit status 128 + signal,
    one line and no traceback; --resume then continues from the checkpoint."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [*GAN_TINY, "--total-steps", "1000000", "--save-every", "1", "--run-dir", str(tmp_path)]
    process = subprocess.Popen([sys.executable, str(ROOT / "gan" / "train_biggan.py"), *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    checkpoint = tmp_path / "seed0" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 600
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signum and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"python gan/train_biggan.py: stopped by {signal.Signals(signum).name}; the run resumes from its last "
        f"checkpoint with: python gan/train_biggan.py --resume --run-dir {tmp_path}")
    step = int(load_checkpoint(checkpoint)["step"])  # 1 or more: the signal came after the first save
    assert train_biggan.main(["--resume", "--run-dir", str(tmp_path), "--total-steps", str(step + 1)]) == 0
    assert f"resumed {tmp_path / 'seed0'} at step {step}" in capsys.readouterr().out
    assert int(load_checkpoint(checkpoint)["step"]) == step + 1


def test_a_signalled_gan_run_keeps_the_steps_since_its_last_checkpoint(tmp_path, capsys):
    """No checkpoint is due (--save-every far away) when SIGTERM arrives: the run writes last.pt at the step it
    stopped at, which holds every logged step, so --resume repeats none."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [*GAN_TINY, "--total-steps", "1000000", "--save-every", "100000", "--log-every", "1", "--run-dir",
            str(tmp_path)]
    process = subprocess.Popen([sys.executable, str(ROOT / "gan" / "train_biggan.py"), *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "seed0" / "log.jsonl"
    deadline = time.monotonic() + 600
    while (not log.exists() or len(log.read_text().splitlines()) < 3) and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    step = int(load_checkpoint(tmp_path / "seed0" / "checkpoints" / "last.pt")["step"])
    logged = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert step >= logged[-1] >= 3 and logged == list(range(1, logged[-1] + 1))
    assert train_biggan.main(["--resume", "--run-dir", str(tmp_path), "--total-steps", str(step + 1)]) == 0
    assert f"resumed {tmp_path / 'seed0'} at step {step}" in capsys.readouterr().out


def test_a_ctrl_c_of_classification_stops_with_one_line_and_resumes(tmp_path):
    """A real process gets SIGINT after its first checkpoint: one line, exit status 130, no traceback; --resume
    continues from the checkpoint and finishes."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [*CLS_TINY, "--norm-act", "evonorm_s0", "--epochs", "100000", "--schedule", "constant"]
    process = subprocess.Popen([sys.executable, str(ROOT / "classification" / "train.py"), *args, "--output-dir",
                                str(out)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 600
    while not (out / "checkpoint.pt").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("python classification/train.py: stopped by SIGINT; the run resumes from its "
                                            f"last checkpoint with: python classification/train.py --resume --output-dir {out}")
    step = load_checkpoint(out / "checkpoint.pt")["step"]
    assert train.main(["--resume", "--output-dir", str(out), "--max-steps", str(step + 1)]) == 0
    assert json.loads((out / "result.json").read_text())["steps"] == step + 1


@pytest.mark.parametrize("augmentation", [[], ["--image-size", "12", "--crop-size", "8"]],
                         ids=["whole images", "random crops"])
def test_a_stop_signal_mid_epoch_saves_that_step_and_the_resume_trains_what_a_whole_run_trains(tmp_path, capsys,
                                                                                               monkeypatch,
                                                                                               augmentation):
    """SIGTERM during step 6 of 8 (the second epoch's second of four): the step ends, the checkpoint is written at
    step 6 with the first epoch's evaluation only, exit status 143; --resume trains steps 7 and 8 and ends with the
    weights of a run never stopped, random crops (drawn from the restored RNG) and dropout included."""
    args = [*CLS_TINY, "--norm-act", "evonorm_s0", "--batch-size", "4", "--epochs", "2", "--schedule", "constant",
            *augmentation]
    assert train.main([*args, "--output-dir", str(tmp_path / "whole")]) == 0
    steps, signalled = [], Trainer.step

    def step_then_stop(self, images, labels):
        steps.append(len(steps) + 1)
        if len(steps) == 6:
            os.kill(os.getpid(), signal.SIGTERM)  # held until the step ends
        return signalled(self, images, labels)

    monkeypatch.setattr(Trainer, "step", step_then_stop)
    out = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stopped:
        train.main([*args, "--output-dir", str(out)])
    assert stopped.value.code == 128 + signal.SIGTERM and steps == [1, 2, 3, 4, 5, 6]
    state = load_checkpoint(out / "checkpoint.pt")
    assert (state["epoch"], state["step"], [entry["step"] for entry in state["history"]]) == (1, 6, [4])
    monkeypatch.setattr(Trainer, "step", signalled)
    assert train.main(["--resume", "--output-dir", str(out)]) == 0
    assert f"resumed {out / 'checkpoint.pt'} at epoch 1, step 6" in capsys.readouterr().out
    resumed, whole = load_checkpoint(out / "checkpoint.pt"), load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    assert [entry["step"] for entry in resumed["history"]] == [entry["step"] for entry in whole["history"]] == [4, 8]
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
