"""The shared run plumbing of evonorm_core.experiment: configs, files, run folders, progress, tables, data."""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
import torch

from evonorm_core.experiment import config as cfg
from evonorm_core.experiment import data, files, progress, rundir, tables


@dataclass(frozen=True)
class Inner:
    lr: float = cfg.option(0.1, "learning rate", min=0, min_open=True)
    anchors: tuple[str, ...] = cfg.option(("a", "b"), "anchors", choices=("a", "b", "c"))

    def __post_init__(self) -> None:
        cfg.validate(self)


@dataclass(frozen=True)
class Run:
    inner: Inner = cfg.option(default_factory=Inner, help="")
    steps: int = cfg.option(10, "training steps", min=1)
    budget: float | None = cfg.option(None, "seconds", min=0, parse=lambda s: float(s[:-1]) * 60 if s.endswith("m") else float(s))
    fast: bool = cfg.option(False, "go fast")
    mode: str = cfg.option("B", "search mode", choices=("B", "S"))
    name: str = cfg.option("x", "not on the command line", cli=False)

    def __post_init__(self) -> None:
        cfg.validate(self)


def parse(argv, defaults=Run()):
    parser = argparse.ArgumentParser(exit_on_error=False)
    cfg.add_config_arguments(parser, Run, defaults)
    return cfg.replace_config(defaults, cfg.explicit_values(parser.parse_args(argv), Run))


def test_flags_are_derived_from_fields_and_only_given_ones_override():
    config = parse(["--lr", "0.5", "--anchors", "c", "a", "--budget", "2m", "--fast", "--mode", "S"])
    assert config == Run(inner=Inner(lr=0.5, anchors=("c", "a")), budget=120.0, fast=True, mode="S")
    assert parse(["--anchors", "b,c"]).inner.anchors == ("b", "c")
    assert parse(["--budget", "none"], Run(budget=5.0)).budget is None
    assert parse([], Run(steps=7)) == Run(steps=7)  # preset kept, nothing given
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse(["--name", "y"])  # cli=False


def test_help_lists_defaults_and_ranges():
    parser = argparse.ArgumentParser()
    cfg.add_config_arguments(parser, Run, Run(steps=42))
    text = parser.format_help()
    assert "training steps; >= 1 (default: 42)" in text and "--no-fast" in text and "one of B, S" in text


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--lr", "-1"], "--lr must be > 0, got -1.0"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--mode", "X"], "--mode must be one of B, S, got 'X'"),
    (["--anchors", "a,z"], "--anchors must be one of a, b, c, got 'z'"),
    (["--budget=-5m"], "--budget must be >= 0, got -300.0"),
])
def test_out_of_range_values_are_errors_naming_flag_value_and_range(argv, message):
    with pytest.raises(cfg.ConfigError) as info:
        parse(argv)
    assert str(info.value) == message


def test_json_round_trip_and_resume_with_fixed_fields(tmp_path):
    config = Run(inner=Inner(lr=0.3, anchors=("b",)), budget=1.5)
    cfg.save_config(tmp_path / "config.json", config)
    loaded = cfg.load_config(tmp_path / "config.json", Run)
    assert loaded == config and isinstance(loaded.inner.anchors, tuple)
    resumed = cfg.replace_config(loaded, {"steps": 20, "mode": "B"}, fixed=("mode", "inner.lr"))
    assert resumed.steps == 20
    with pytest.raises(cfg.ConfigError, match="--mode cannot change when resuming: the run was started with B, got S"):
        cfg.replace_config(loaded, {"mode": "S"}, fixed=("mode",))
    (tmp_path / "bad.json").write_text(json.dumps({"steps": 3, "colour": "red"}))
    with pytest.raises(cfg.ConfigError, match=r"unknown setting\(s\) \['colour'\] for Run in .*bad.json"):
        cfg.load_config(tmp_path / "bad.json", Run)
    (tmp_path / "cut.json").write_text('{"steps": 3')
    with pytest.raises(files.CorruptFileError, match="cut.json.*is not valid JSON"):
        cfg.load_config(tmp_path / "cut.json", Run)


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    files.atomic_write_json(tmp_path / "a.json", {"x": 1})
    files.atomic_write_text(tmp_path / "a.json", "2\n")
    assert (tmp_path / "a.json").read_text() == "2\n" and os.listdir(tmp_path) == ["a.json"]


def test_jsonl_errors_name_file_and_line(tmp_path):
    log = tmp_path / "log.jsonl"
    for i in range(3):
        files.append_jsonl(log, {"id": i})
    with open(log, "a") as f:
        f.write('{"id": 3, "genome"')  # a write cut short by a kill
    assert files.read_jsonl(log, limit=3) == [{"id": 0}, {"id": 1}, {"id": 2}]
    with pytest.raises(files.CorruptFileError, match=r"log.jsonl', line 4: not valid JSON .*incomplete"):
        files.read_jsonl(log)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_checkpoints_refuse_pickled_objects_and_name_truncated_files(tmp_path):
    good = tmp_path / "good.pt"
    files.save_checkpoint(good, {"step": 3, "w": torch.ones(2), "config": {"lr": 0.1}})
    state = files.load_checkpoint(good)
    assert state["step"] == 3 and torch.equal(state["w"], torch.ones(2))
    evil = tmp_path / "evil.pt"
    torch.save({"payload": Evil()}, evil)
    with pytest.raises(files.CorruptFileError, match="evil.pt.*refused because unpickling them could run code"):
        files.load_checkpoint(evil)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:100])
    with pytest.raises(files.CorruptFileError, match="cut.pt.*truncated or not a PyTorch checkpoint"):
        files.load_checkpoint(cut)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        files.load_checkpoint(tmp_path / "missing.pt")


def test_run_folder_refuses_earlier_outputs_without_resume(tmp_path):
    out = tmp_path / "run"
    with rundir.RunDir(out) as run:
        (run / "log.jsonl").write_text("{}\n")
    with pytest.raises(rundir.RunDirError, match=r"is not empty \(log.jsonl\); pass --resume"):
        rundir.RunDir(out)
    with rundir.RunDir(out, resume=True) as run:
        assert run.resumed
    assert not rundir.RunDir(tmp_path / "fresh", resume=True).resumed


def _hold(path, ready, release):
    with rundir.RunDir(path):
        ready.set()
        release.wait(10)


def test_a_second_writer_is_refused_and_the_lock_dies_with_its_process(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(tmp_path / "run", ready, release))
    holder.start()
    assert ready.wait(10)
    with pytest.raises(rundir.RunDirError, match=rf"is in use by process {holder.pid}"):
        rundir.RunDir(tmp_path / "run", resume=True)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    rundir.RunDir(tmp_path / "run", resume=True).close()  # kill -9 released it


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59.6, "1m00s"), (185, "3m05s"), (3720, "1h02m"), (183600, "2d03h"), (float("nan"), "?")])
def test_format_duration(seconds, text):
    assert progress.format_duration(seconds) == text


def test_progress_line_has_rate_eta_and_values():
    import io

    stream = io.StringIO()
    bar = progress.Progress(total=4, unit="steps", prefix="demo", interval=1e9, stream=stream)
    bar.update(force=True, loss=0.5)
    bar.update(3)  # the last unit always prints
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[demo] 1/4 steps (25%) | ") and "loss 0.5" in lines[0]
    assert "ETA" in lines[0] and lines[1].startswith("[demo] 4/4 steps (100%)")


def test_paper_table_record_and_markdown():
    table = tables.PaperTable("t", "Table T", "paper, Table T", ("model", "layer"), ("128", "2"),
                              {("r50", "BN"): (76.1, 70.7), ("r50", "S0"): (77.4, None)})
    assert table.cell(("r50", "BN"), "2") == 70.7 and table.values("layer") == ["BN", "S0"]
    text = table.to_markdown({("r50", "S0"): {"measured 2": "91.0 ± 1.0 (n=3)"}}, ["measured 2"])
    assert "| r50 | S0 | 77.4 | - | 91.0 ± 1.0 (n=3) |" in text and "| model | layer | paper 128 | paper 2 | measured 2 |" in text
    with pytest.raises(ValueError, match="has 1 values for 2 columns"):
        tables.PaperTable("t", "T", "s", ("layer",), ("a", "b"), {("x",): (1.0,)})
    assert tables.format_mean_std([1.0, 2.0, 3.0]) == "2.0 ± 1.0 (n=3)"


def test_mean_and_std_is_the_sample_std_over_seeds():
    # sample std by hand: mean 0.95, squared deviations 0.0004 + 0 + 0.0004 over n - 1 = 2
    assert tables.mean_and_std([0.93, 0.95, 0.97]) == pytest.approx((0.95, 0.02), abs=1e-12)
    assert tables.mean_and_std([0.931234, 0.95, 0.97], ndigits=3) == (0.95, 0.019)
    assert tables.mean_and_std([0.9]) == (0.9, None) and tables.mean_and_std([]) == (None, None)
    assert tables.mean_std_fields([0.931234, 0.95, 0.97], 3) == {"mean": 0.95, "std": 0.019}
    assert tables.format_mean_std([0.9]) == "0.9 (n=1)" and tables.format_mean_std([]) == "-"


def test_plot_series_writes_a_png(tmp_path):
    path = tables.plot_series(tmp_path / "p.png", {"r50": [tables.Series("BN", [128, 2], [90, 80], [1, 2])], "empty": []},
                              xlabel="images per worker", ylabel="top-1", log2_x=True, invert_x=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_digits_split_is_fixed_and_in_unit_range():
    split = data.digits(16, channels=3)
    again = data.digits(16, channels=3)
    assert split.train_images.shape == (1438, 3, 16, 16) and split.val_images.shape == (359, 3, 16, 16)
    assert torch.equal(split.val_labels, again.val_labels) and split.num_classes == 10
    assert 0 <= float(split.train_images.min()) and float(split.train_images.max()) <= 1
    with pytest.raises(ValueError, match="image_size must be an int >= 8"):
        data.digits(4)


def test_missing_datasets_say_what_layout_is_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="CIFAR-10 not found at .*cifar-10-batches-py"):
        data.cifar10(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"ImageNet not found: missing .*train"):
        data.imagenet(tmp_path, None, None)


def test_importing_the_plumbing_needs_only_torch():
    code = textwrap.dedent("""
        import sys
        import evonorm_core.experiment.config, evonorm_core.experiment.files, evonorm_core.experiment.rundir
        import evonorm_core.experiment.data, evonorm_core.experiment.tables, evonorm_core.experiment.progress
        import evonorm_core.experiment.distributed
        heavy = [m for m in ("torchvision", "sklearn", "matplotlib") if m in sys.modules]
        assert not heavy, heavy
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_failed_atomic_write_leaves_the_old_file_and_nothing_else(tmp_path):
    """Atomic writes: a write that fails half-way leaves the previous file as it was and no temporary
    file behind in the run folder (a crash in the middle of a checkpoint must not litter the run)."""
    from evonorm_core.experiment.files import atomic_write_bytes, save_checkpoint

    target = tmp_path / "last.pt"
    atomic_write_bytes(target, b"old")

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("cannot save this")

    with pytest.raises(TypeError):
        atomic_write_bytes(target, "text, not bytes")
    with pytest.raises(RuntimeError, match="cannot save this"):
        save_checkpoint(target, {"step": 1, "bad": Unsaveable()})
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


@pytest.mark.parametrize("make,message", [
    (lambda: Run(steps=True), "--steps must be a number, got True"),
    (lambda: Run(budget=False), "--budget must be a number, got False"),
    (lambda: Inner(lr=True), "--lr must be a number, got True"),
])
def test_booleans_are_not_numbers(make, message):
    """``bool`` is a subclass of ``int`` in Python, but ``true``/``false`` in a config is a mistake,
    not 1/0: a numeric setting given one must be refused, naming the value (steps=True would
    otherwise pass ``>= 1``)."""
    with pytest.raises(cfg.ConfigError) as info:
        make()
    assert str(info.value) == message


def test_integer_settings_refuse_fractions_in_code_and_in_json(tmp_path):
    """``steps=1.5`` is a mistake, not 1 or 2 steps; a float setting takes an int as it is."""
    with pytest.raises(cfg.ConfigError, match=r"--steps must be an integer, got 1.5"):
        Run(steps=1.5)
    (tmp_path / "config.json").write_text(json.dumps({"steps": 2.0}))
    with pytest.raises(cfg.ConfigError, match=r"--steps must be an integer, got 2.0"):
        cfg.load_config(tmp_path / "config.json", Run)
    assert Run(budget=3).budget == 3


def test_booleans_in_a_json_config_are_not_numbers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"steps": True}))
    with pytest.raises(cfg.ConfigError, match="--steps must be a number, got True"):
        cfg.load_config(tmp_path / "config.json", Run)
