"""gan/table5.py, the Table 5 miniature: its layers (the paper's six and the no-normalization control), the widths
and groups of its grouped layers, and its runs trained to a peak (extended while their best snapshot is too
recent, recorded with the step of the best and of the last snapshot)."""
from __future__ import annotations

import json
import math
import re
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from evonorm_core import GroupedNormAct2d, list_norm_acts
from evonorm_core.experiment.files import CorruptFileError, load_checkpoint, read_jsonl, save_checkpoint
from evonorm_core.experiment.grid import GridResult
from evonorm_core.experiment.rundir import RUN_FILE
from evonorm_core.registry import options_of
from evonorm_suite.gan import digits_classifier, report, table5, train_biggan
from evonorm_suite.gan.checkpoint import RUN_KIND, build_generator
from evonorm_suite.gan.config import PRESETS
from evonorm_suite.gan.reference_statistics import weights_digest

GROUPED = [name for name in list_norm_acts() if "groups" in options_of(name)]


# ---------------------------------------------------------- widths and groups
@pytest.mark.parametrize("norm", GROUPED)
def test_every_grouped_layer_of_the_miniature_has_more_than_one_channel_per_group(norm):
    """The digits preset's G is 64 channels wide in its stages and 16 in its bottlenecks; with 8 groups every grouped
    layer has 2 or 8 channels per group (with GN's 16 or EvoNorm-S's 32 the 16-channel layers were instance norms)."""
    generator = build_generator(replace(PRESETS["digits"], norm=norm), 10)
    grouped = [m for m in generator.modules() if isinstance(m, GroupedNormAct2d)]
    assert grouped and all(m.num_channels // m.groups >= 2 for m in grouped)
    assert {(m.num_channels, m.groups) for m in grouped} == {(16, 8), (64, 8)}


def test_the_paper_preset_keeps_the_papers_groups_and_ungrouped_layers_ignore_groups():
    paper, digits = PRESETS["imagenet128"], PRESETS["digits"]
    assert paper.groups is None and replace(paper, norm="gn_relu").norm_options == {"groups": 16}
    assert replace(paper, norm="evonorm_s0").norm_options == {}  # EvoNorm-S's default: 32 groups
    assert digits.groups == 8
    for norm in ("bn_relu", "ln_relu", "pixelnorm_relu", "no_norm_relu"):
        assert "groups" not in replace(digits, norm=norm).norm_options


# ---------------------------------------------------------- the no-normalization generator
def test_no_norm_relu_is_a_layer_of_the_grid_and_trains_as_the_generator_norm_act(tmp_path):
    assert "no_norm_relu" in table5.LABELS
    args = ["--run-dir", str(tmp_path), "--norm", "no_norm_relu", "--channels", "8", "--batch-size", "8",
            "--micro-batch", "8", "--total-steps", "3", "--log-every", "1", "--eval-every", "0", "--threads", "1"]
    assert train_biggan.main(args) == 0
    run = tmp_path / "seed0"
    state = load_checkpoint(run / "checkpoints" / "last.pt")
    assert state["step"] == 3 and state["config"]["norm"] == "no_norm_relu"
    losses = read_jsonl(run / "log.jsonl")
    assert [r["step"] for r in losses] == [1, 2, 3]
    assert all(math.isfinite(r[k]) for r in losses for k in ("loss_d", "loss_g"))


# ---------------------------------------------------------- runs trained to a peak
SCHEDULE = table5.Schedule(steps=2000, extend_by=1000, max_steps=4000, snapshot_every=500, patience=2)


def write_snapshots(run_dir: Path, target: int, fid_at, layer: str = "bn_relu", seed: int = 0,
                    digest: str = "classifier") -> None:
    """What train_biggan and evaluate --all-snapshots leave: config.json, metrics/<checkpoint>.json per snapshot
    (last.pt repeating the last step, measured by the classifier whose SHA-256 is ``digest``) and metrics.json at
    the best FID."""
    shutil.rmtree(run_dir / "metrics", ignore_errors=True)
    (run_dir / "metrics").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"total_steps": target}))
    (run_dir / RUN_FILE).write_text(json.dumps(RUN_KIND.manifest()))
    records = []
    kept = [(step, f"step_{step:07d}.pt") for step in range(SCHEDULE.snapshot_every, target + 1, SCHEDULE.snapshot_every)]
    for step, checkpoint in [*kept, (target, "last.pt")]:
        records.append(dict(is_mean=10.0 - fid_at(step) / 10, is_std=0.1, fid=fid_at(step), norm=layer,
                            norm_options={}, step=step, num_samples=359, feature_extractor="digits-classifier",
                            feature_extractor_sha256=digest,
                            sampling="eval mode", seed=seed, dataset="digits", resolution=16, checkpoint=checkpoint))
        (run_dir / "metrics" / checkpoint.replace(".pt", ".json")).write_text(json.dumps(records[-1]))
    best = min(records, key=lambda r: r["fid"])
    (run_dir / "metrics.json").write_text(json.dumps(best))


def valley(bottom: int):
    return lambda step: 10.0 + abs(step - bottom) / 100


@pytest.mark.parametrize("name, text, message", [
    ("metrics/last.json", '{"step": 100}',
     "snapshot metrics '{run}/metrics/last.json' lacks ['norm', 'seed', 'is_mean', 'fid', 'dataset', "),
    ("metrics/last.json", "[1]", "snapshot metrics '{run}/metrics/last.json' is not a JSON object"),
    ("config.json", '{"seed": 0}', "run configuration '{run}/config.json' lacks ['total_steps']"),
])
def test_a_run_file_without_the_fields_the_grid_reads_is_named(tmp_path, name, text, message):
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / name).write_text(text)
    with pytest.raises(CorruptFileError, match=re.escape(message.format(run=run))):
        table5.RunState.read(run)


def test_a_run_metrics_or_cost_file_of_another_shape_is_named(tmp_path):
    (tmp_path / "metrics.json").write_text('{"fid": 3.0}')
    with pytest.raises(CorruptFileError, match=re.escape(f"run metrics '{tmp_path / 'metrics.json'}' lacks ['norm', "
                                                         "'seed', 'step', 'is_mean', 'dataset',")):
        table5.run_record(tmp_path / "metrics.json", SCHEDULE)
    (tmp_path / "cost.json").write_text("[60.0]")
    with pytest.raises(CorruptFileError, match=re.escape(f"run cost '{tmp_path / 'cost.json'}' is not a JSON object")):
        table5.run_cost(tmp_path)


def test_a_run_is_extended_until_patience_snapshots_follow_its_best_or_it_reaches_the_cap(tmp_path):
    run = tmp_path / "run"
    assert table5.RunState.read(run).next_target(SCHEDULE) == 2000  # not started
    write_snapshots(run, 2000, valley(2000))
    assert table5.RunState.read(run).next_target(SCHEDULE) == 3000  # best at its last snapshot: train on
    write_snapshots(run, 3000, valley(2500))
    assert table5.RunState.read(run).after_peak == 1
    assert table5.RunState.read(run).next_target(SCHEDULE) == 4000  # one snapshot after the best: not enough
    write_snapshots(run, 4000, valley(9000))
    state = table5.RunState.read(run)
    assert (state.last_step, state.peak["step"], state.next_target(SCHEDULE)) == (4000, 4000, None)  # the cap
    write_snapshots(run, 3000, valley(2000))
    assert table5.RunState.read(run).next_target(SCHEDULE) is None  # 2500 and 3000 after the best: past its peak
    (run / "config.json").write_text(json.dumps({"total_steps": 3500}))  # resumed, not yet evaluated there
    assert table5.RunState.read(run).next_target(SCHEDULE) == 3500
    write_snapshots(run, 1500, valley(500))  # an earlier, shorter grid's run: the schedule's first length first
    assert table5.RunState.read(run).next_target(SCHEDULE) == 2000


def next_stage(cell) -> tuple[tuple[str, ...], ...]:
    return tuple(cell.stages())


def test_each_stage_trains_to_the_runs_next_target_with_kept_snapshots_and_the_grids_groups(tmp_path, capsys):
    classifier = tmp_path / "digits_classifier_16px.pt"
    cell = table5.run_cell("evonorm_s0", 2, tmp_path, SCHEDULE, classifier)
    train, evaluate = next_stage(cell)
    flags = dict(zip(train[3::2], train[4::2]))
    assert train[1:3] == ("-m", "evonorm_suite.gan.train_biggan") and "--resume" not in train
    assert {k: flags[k] for k in ("--norm", "--seed", "--run-dir", "--total-steps", "--keep-every", "--save-every",
                                  "--eval-every", "--groups")} == {
        "--norm": "evonorm_s0", "--seed": "2", "--run-dir": str(tmp_path / "evonorm_s0"), "--total-steps": "2000",
        "--keep-every": "500", "--save-every": "500", "--eval-every": "0", "--groups": "8"}
    assert evaluate[1:] == ("-m", "evonorm_suite.gan.evaluate", str(tmp_path / "evonorm_s0" / "seed2"),
                            "--all-snapshots", "--digits-classifier", str(classifier))
    assert cell.id == "evonorm_s0/seed2" and not cell.finished()
    assert "--groups" not in next_stage(table5.run_cell("bn_relu", 0, tmp_path, SCHEDULE, classifier))[0]
    assert "[table5] evonorm_s0/seed2: training to step 2000" in capsys.readouterr().out
    run = tmp_path / "evonorm_s0" / "seed2"
    write_snapshots(run, 2000, valley(2000))
    (run / "run.json").write_text("{}")  # holds a run: the next stage resumes it
    train, _ = next_stage(table5.run_cell("evonorm_s0", 2, tmp_path, SCHEDULE, classifier))
    assert train[-1] == "--resume" and train[train.index("--total-steps") + 1] == "3000"
    assert ("evonorm_s0/seed2: training to step 3000 from step 0 (no checkpoint of the run on this machine"
            in capsys.readouterr().out)  # a clone of committed runs: its checkpoints stayed where it trained
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    next_stage(cell)
    assert "evonorm_s0/seed2: best FID 10.00 at step 2000 of 2000: training on to step 3000" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="evonorm_s0/seed2 did not reach step 3000 or has no evaluation there"):
        next_stage(cell)  # its stage succeeded, yet the run did not advance: the cell fails, not the grid
    write_snapshots(run, 2000, valley(500))
    assert cell.finished() and next_stage(table5.run_cell("evonorm_s0", 2, tmp_path, SCHEDULE, classifier)) == ()


def fake_grid(log: list):
    """A run_grid that 'trains' each unfinished cell to its --total-steps with a FID valley per layer, measured by
    the classifier its evaluation is given."""
    bottoms = {"bn_relu": 1000, "no_norm_relu": 9000}  # no_norm_relu keeps improving to the cap

    def run(cells, folder, *, jobs, name, on_cell_end):
        result = GridResult()
        for cell in (c for c in cells if not c.finished()):
            layer, seed = cell.id.split("/seed")
            while stage := next_stage(cell):
                train, evaluate = stage
                target = int(train[train.index("--total-steps") + 1])
                log.append((layer, int(seed), target))
                write_snapshots(folder / layer / f"seed{seed}", target, valley(bottoms.get(layer, 2500)), layer,
                                int(seed), weights_digest(evaluate[-1]))
            result.finished.append(cell.id)
            on_cell_end(cell.id, 2.0, 1.5)
        return result
    return run


@pytest.fixture
def cached_classifier(tmp_path, monkeypatch):
    """A classifier file standing in for the cached one (an untrained DigitsClassifier: no ten-second training)."""
    path = tmp_path / "cache" / "digits_classifier.pt"
    path.parent.mkdir()
    save_checkpoint(path, {"model": digits_classifier.DigitsClassifier().state_dict(), "resolution": 16})
    monkeypatch.setattr(digits_classifier, "weights_file", lambda resolution: path)
    return path


def test_the_grid_trains_runs_in_turn_until_each_is_past_its_peak_and_records_where_each_peaked(
        tmp_path, monkeypatch, cached_classifier):
    ran: list = []
    monkeypatch.setattr(table5, "run_grid", fake_grid(ran))
    calibrated_with = []
    monkeypatch.setattr(table5, "digits_calibration", lambda resolution, weights: calibrated_with.append(weights) or {
        "fid_floor": 1.0, "fid_noise": 100.0})
    out = tmp_path / "out"
    out.mkdir()
    (out / "table5.json").write_text(json.dumps({"cpu_seconds": 10.0}))  # an earlier grid's: not added
    runs = tmp_path / "runs"
    argv = ["--runs-dir", str(runs), "--out", str(out), "--jobs", "1", "--steps", "2000", "--max-steps", "4000"]
    assert table5.main(argv) == 0
    pinned = runs / "digits_classifier_16px.pt"
    assert pinned.read_bytes() == cached_classifier.read_bytes() and calibrated_with == [pinned]
    assert {layer for layer, _, _ in ran} == set(report.LABELS) and len(report.LABELS) == 7
    keys = [(layer, seed) for layer, seed, _ in ran]
    turns = [key for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]]
    assert len(turns) == len(set(turns)) == 21  # --jobs 1: one run at a time, each to its end before the next
    by_layer = {layer: sorted({t for name, _, t in ran if name == layer}) for layer in report.LABELS}
    assert by_layer["bn_relu"] == [2000]  # best at 1000: 1500 and 2000 after it
    assert by_layer["evonorm_s0"] == [2000, 3000, 4000]  # best at 2500: one snapshot after it at 3000, so on
    assert by_layer["no_norm_relu"] == [2000, 3000, 4000]  # still improving at the cap
    summary = json.loads((out / "table5.json").read_text())
    assert summary["cpu_seconds"] == 1.5 * 21 and summary["steps"] == 2000  # one grid cell per run, all its stages
    assert summary["cpu_seconds_counts"].endswith("where the record has none: none; runs without a record: none")
    assert json.loads((runs / "evonorm_s0" / "seed1" / "cost.json").read_text()) == {
        "seconds": 2.0, "cpu_seconds": 1.5, "cells": 1}
    assert summary["feature_extractor_sha256"] == weights_digest(str(pinned))
    assert summary["schedule"] == {"steps": 2000, "extend_by": 1000, "max_steps": 4000, "snapshot_every": 500,
                                   "patience": 2}
    layers = summary["layers"]
    assert (layers["bn_relu"]["steps"], layers["bn_relu"]["last_steps"]) == ([1000] * 3, [2000] * 3)
    assert layers["bn_relu"]["best_at_last"] == [False] * 3
    assert all(result["unfinished"] == [] for result in layers.values())
    assert layers["no_norm_relu"]["best_at_last"] == [True] * 3 and layers["no_norm_relu"]["steps"] == [4000] * 3
    assert layers["bn_relu"]["snapshots"][0][:2] == [{"step": 500, "fid": 15.0, "is": 8.5},
                                                     {"step": 1000, "fid": 10.0, "is": 9.0}]
    ran.clear()
    assert table5.main(argv) == 0 and ran == []  # every run is done: nothing reruns
    assert json.loads((out / "table5.json").read_text())["cpu_seconds"] == summary["cpu_seconds"]
    (runs / "bn_relu" / "seed2" / "cost.json").unlink()
    (runs / "gn_relu" / "seed0" / "cost.json").write_text(json.dumps({"seconds": 7.0, "cells": 1}))  # wall time only
    table5.add_cost(runs / "gn_relu" / "seed1", 1.0, 0.5)
    table5.add_cost(runs / "ln_relu" / "seed0", 1.0, 0.5)
    (runs / "ln_relu" / "seed0" / "cost.json").write_text(json.dumps({"seconds": 7.0, "cells": 1}))
    table5.add_cost(runs / "ln_relu" / "seed0", 1.0, 0.5)  # a wall-time record gets no CPU time of some cells
    assert json.loads((runs / "ln_relu" / "seed0" / "cost.json").read_text()) == {"seconds": 8.0, "cells": 2}
    assert table5.main(argv) == 0
    summary = json.loads((out / "table5.json").read_text())
    # bn_relu/seed2 has no record; gn_relu/seed0 and ln_relu/seed0 count wall time; gn_relu/seed1 one more grid's
    assert summary["cpu_seconds"] == 1.5 * (21 - 3) + 7.0 + 8.0 + 0.5
    assert summary["cpu_seconds_counts"].endswith("where the record has none: gn_relu/seed0, ln_relu/seed0; runs "
                                                  "without a record: bn_relu/seed2")
    assert table5.main([*argv[:-4], "--steps", "3000", "--max-steps", "4000", "--report-only"]) == 0
    layers = json.loads((out / "table5.json").read_text())["layers"]  # a longer first length: short runs unfinished
    assert layers["bn_relu"]["unfinished"] == [0, 1, 2] and layers["no_norm_relu"]["unfinished"] == []


def test_runs_measured_by_another_classifier_are_refused_by_name(tmp_path, monkeypatch, cached_classifier):
    monkeypatch.setattr(table5, "digits_calibration", lambda resolution, weights: {"fid_floor": 1.0, "fid_noise": 9.0})
    runs = tmp_path / "runs"
    pinned = table5.pinned_classifier(runs)
    write_snapshots(runs / "bn_relu" / "seed0", 2000, valley(1000), digest=weights_digest(str(pinned)))
    write_snapshots(runs / "gn_relu" / "seed1", 2000, valley(1000), "gn_relu", 1, digest="another classifier")
    with pytest.raises(SystemExit, match=r"gn_relu/seed1 in .* were evaluated with another digits classifier"):
        table5.main(["--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--report-only"])
    (runs / "gn_relu" / "seed1" / "metrics" / "step_0000500.json").unlink()  # the others still carry it
    with pytest.raises(SystemExit, match="gn_relu/seed1"):
        table5.main(["--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--report-only"])


def test_the_report_shows_seed_0s_samples_at_its_reported_step_and_keeps_a_grid_it_has_no_samples_for(tmp_path, monkeypatch,
                                                                                   cached_classifier):
    monkeypatch.setattr(table5, "digits_calibration", lambda resolution, weights: {"fid_floor": 1.0, "fid_noise": 9.0})
    runs, out = tmp_path / "runs", tmp_path / "out"
    digest = weights_digest(str(table5.pinned_classifier(runs)))
    for layer in ("bn_relu", "gn_relu", "ln_relu"):
        write_snapshots(runs / layer / "seed0", 2000, valley(1000), layer, digest=digest)
    samples = runs / "gn_relu" / "seed0" / "samples"
    samples.mkdir()
    (samples / "step_0001000.png").write_bytes(b"step 1000")
    (samples / "step_0002000.png").write_bytes(b"step 2000")
    out.mkdir()
    (out / "bn_relu.png").write_bytes(b"a clone's committed grid")  # its run's samples are not here
    argv = ["--runs-dir", str(runs), "--out", str(out), "--report-only", "--steps", "2000"]
    assert table5.main(argv) == 0
    layers = json.loads((out / "table5.json").read_text())["layers"]
    assert layers["bn_relu"]["grid_png"] == str(out / "bn_relu.png")
    assert (out / "bn_relu.png").read_bytes() == b"a clone's committed grid"
    assert layers["gn_relu"]["grid_png"] == str(out / "gn_relu.png")
    assert (out / "gn_relu.png").read_bytes() == b"step 1000"  # seed 0's samples at its reported (best) step
    assert "grid_png" not in layers["ln_relu"]  # neither samples nor a grid: none is claimed
    (samples / "step_0002500.png").write_bytes(b"step 2500")  # training on to a longer first length
    assert table5.main([*argv[:-1], "3000"]) == 0
    assert (out / "gn_relu.png").read_bytes() == b"step 1000"  # an unfinished run's samples are not copied


def test_report_only_without_evaluated_runs_is_refused_by_folder_before_pinning_a_classifier(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit, match=rf"error: no evaluated run under {runs} \(no metrics.json\)"):
        table5.main(["--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--report-only"])
    assert not runs.exists()  # nothing pinned, no folder made
    write_snapshots(runs / "bn_relu" / "seed0", 2000, valley(1000))
    (runs / "bn_relu" / "seed0" / "metrics.json").unlink()  # snapshots evaluated, the run not yet summarised
    with pytest.raises(SystemExit, match="no evaluated run under"):
        table5.main(["--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--report-only"])


def test_a_pinned_classifier_of_another_resolution_is_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    save_checkpoint(runs / "digits_classifier_16px.pt", {"model": {}, "resolution": 32})
    with pytest.raises(ValueError, match="trained on 32 px digits, the run's images are 16 px"):
        table5.pinned_classifier(runs)


def test_the_time_of_a_stopped_run_goes_to_its_cost_and_a_run_stopped_before_it_began_has_none(tmp_path, monkeypatch):
    def stopped(cells, folder, *, jobs, name, on_cell_end):
        (folder / "bn_relu" / "seed0").mkdir(parents=True)
        on_cell_end("bn_relu/seed0", 60.0, 59.0)
        on_cell_end("bn_relu/seed1", 0.1, 0.0)
        return GridResult(stopped_by=signal.SIGTERM)

    monkeypatch.setattr(table5, "run_grid", stopped)
    assert table5.train_to_peaks(["bn_relu"], [0, 1], tmp_path, SCHEDULE, 2, tmp_path / "classifier.pt") == 143
    assert table5.run_cost(tmp_path / "bn_relu" / "seed0") == {"seconds": 60.0, "cpu_seconds": 59.0, "cells": 1}
    assert not (tmp_path / "bn_relu" / "seed1").exists()


@pytest.mark.parametrize("argv,message", [
    (["--snapshot-every", "12000"], "--snapshot-every must be >= 1 and <= --steps, got 12000 and 10000"),
    (["--max-steps", "1000"], "--max-steps >= --steps"),
    (["--patience", "0"], "--patience must be >= 1, got 0"),
])
def test_a_bad_schedule_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        table5.main([*argv, "--report-only"])
    assert message in capsys.readouterr().err
