"""The paper's tables as grids: stored numbers, commands, and the report from a fixture run directory."""
import json
from pathlib import Path

import pytest
import torch

from evonorm_core.experiment.config import config_to_dict
from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.rundir import open_run
from evonorm_core.experiment.tables import plot_series
from evonorm_suite.classification import tables as tables_module
from evonorm_suite.classification.paper_tables import LAYERS, TABLES
from evonorm_suite.classification.tables import (
    CIFAR10_FRAMING,
    SETTING_KEYS,
    Cell,
    MiniScale,
    cells,
    format_measured,
    load_results,
    main,
    mean_curve,
    mini_config,
    paper_command,
    report_markdown,
    step_settings,
    step_words,
    summary,
)
from evonorm_suite.classification.train import RUN_KIND, config_from_argv, resolve_recipe

from . import paper_classification_tables as paper

THIS_MACHINE = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"  # what a run here records


def printed(value: float) -> str:
    return "1e-3" if value == 1e-3 else f"{value:.1f}"


def expected_tables() -> dict:
    """table -> {(model, label): printed row}, from the paper text (tests/paper_classification_tables.py)."""
    models = ["resnet50", "resnet101", "mobilenetv2", "mnasnet_b1", "efficientnet_b0", "efficientnet_b5"]
    assert paper.TABLE2_COLUMNS == ["R-50", "R-101", "MobileNetV2", "MnasNet-B1", "EfficientNet-B0", "EfficientNet-B5"]
    table2 = {(m, label): [row[i]] for label, row in paper.TABLE2.items() for i, m in enumerate(models)}
    def block(model, rows):
        return {(model, label): row for label, row in rows.items()}
    return {
        "table2": table2,
        "table3": {key: row for key, row in paper.TABLE3.items()},
        "table9": block("resnet50", paper.TABLE9),
        "table10": block("resnet50", paper.TABLE10),
        "table11": block("resnet50", paper.TABLE11),
        "table12": block("resnet50", paper.TABLE12),
        "table13": block("mobilenetv2", paper.TABLE13),
    }


@pytest.mark.parametrize("key", sorted(TABLES))
def test_every_cell_holds_the_papers_number(key):
    expected = expected_tables()[key]
    table = TABLES[key]
    assert list(table.accuracy) == list(expected)  # same rows, same order
    for row, values in table.accuracy.items():
        assert [printed(v) for v in values] == expected[row], row
    assert table.batches == (() if key == "table2" else paper.BATCHES)


def test_grid_shapes():
    assert len(TABLES["table2"].accuracy) == 6 * 10
    assert len(TABLES["table3"].accuracy) == 2 * 7
    for key in ("table9", "table10", "table11", "table12", "table13"):
        assert len(TABLES[key].accuracy) == 6 and TABLES[key].batches == (128, 64, 32, 16, 8, 4)
    assert len(cells(TABLES["table3"], None, (0, 1))) == 2 * 7 * 6 * 2
    assert len(cells(TABLES["table2"], None, (0,))) == 6 * 10  # every row, Random and Random + rej included
    # the miniature adds the controls: the no-norm ReLU to Table 2, both to Table 3
    assert len(cells(TABLES["table2"], None, (0,), with_controls=True)) == 6 * 11
    assert len(cells(TABLES["table3"], (4,), (0,), with_controls=True)) == 2 * 9
    assert [c.label for c in cells(TABLES["table3"], (4,), (0,), ["resnet50"], with_controls=True)][-2:] == [
        "ReLU (no norm)", "Random + rej"]


def test_paper_commands_pass_the_table_and_batch():
    r50 = paper_command(TABLES["table11"], Cell("resnet50", "EvoNorm-S0", 4), Path("r"), "/in")
    assert r50[r50.index("--table") + 1] == "table11" and r50[r50.index("--batch-size") + 1] == "4"
    assert "--resume" not in r50 and r50[r50.index("--data-dir") + 1] == "/in"  # nothing started in r/ yet


def write_run(root, model, layer, batch, seed, top1):
    folder = root / model / layer / batch / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": model, "norm_act": layer, "seed": seed},
                                                    "final_top1": top1}))


@pytest.fixture
def fixture_runs(tmp_path):
    for seed, shift in ((0, 0.0), (1, 2.0)):
        for layer, accs in (("bn_relu", (90.0, 60.0)), ("evonorm_s0", (91.0, 89.0))):
            for batch, acc in zip(("b128", "b2"), accs):
                write_run(tmp_path, "resnet50_cifar", layer, batch, seed, acc + shift)
    return tmp_path


def test_report_renders_paper_and_measured_side_by_side(fixture_runs):
    results = load_results(fixture_runs)
    assert results[("resnet50", "bn_relu", 2)] == [60.0, 62.0]
    text = report_markdown(TABLES["table3"], results)
    assert "| BN-ReLU | 76.1 | 76.2 | 76.1 | 75.6 | 74.3 | 70.7 | 91.0 ± 1.4 (n=2) | 61.0 ± 1.4 (n=2) |" in text
    assert "| EvoNorm-S0 | 77.4 |" in text and "### mobilenetv2 (not measured)" in text


def test_report_cli_writes_the_batch_plot(fixture_runs, capsys):
    main(["report", "table3", str(fixture_runs)])
    assert "## Table 3" in capsys.readouterr().out
    png = fixture_runs / "table3.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_report_cli_plots_every_seed_of_a_one_setting_table(tmp_path, capsys):
    for seed, top1 in enumerate((97.0, 98.0, None)):  # the third run diverged: drawn as a cross at 0 %
        write_run(tmp_path, "efficientnet_cifar", "bn_relu", "recipe", seed, top1)
        write_run(tmp_path, "efficientnet_cifar", "no_norm_relu", "recipe", seed, None)
    main(["report", "table2", str(tmp_path), "--png", str(tmp_path / "seeds.png")])
    out = capsys.readouterr().out
    assert f"final top-1 per seed: {tmp_path / 'seeds.png'}" in out
    assert "| BN-ReLU | 76.4 | 65.0 ± 56.3 (n=3), diverged (1/3) counted as 0 |" in out
    png = tmp_path / "seeds.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_report_says_what_trained_the_runs(fixture_runs, capsys):
    for i, result in enumerate(sorted(fixture_runs.rglob("result.json"))):
        data = json.loads(result.read_text())
        data["device"] = "NVIDIA H100 80GB HBM3" if i == 0 else "cpu"
        result.write_text(json.dumps(data))
    main(["report", "table3", str(fixture_runs)])
    assert "trained on: NVIDIA H100 80GB HBM3 (1 runs), cpu (7 runs)" in capsys.readouterr().out


def test_a_diverged_mini_cell_records_its_device(tmp_path, monkeypatch):
    def diverge(config):
        raise FloatingPointError("loss became nan at step 3")

    monkeypatch.setattr(tables_module, "train", diverge)
    config = mini_config(TABLES["table3"], Cell("resnet50", "ReLU (no norm)", 32), MiniScale(), tmp_path)
    tables_module.run_mini_cell(config)
    result = json.loads((Path(config.output_dir) / "result.json").read_text())
    assert result["final_top1"] is None and result["diverged"] == "loss became nan at step 3"
    assert result["device"] == THIS_MACHINE


def test_table2_report_and_missing_dir(tmp_path, capsys):
    write_run(tmp_path, "efficientnet_cifar", "evonorm_b0", "recipe", 0, 80.0)
    main(["report", "table2", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| EvoNorm-B0 | 76.8 | 80.0 (n=1) |" in out and "| Random | 0.001 | - |" in out
    assert "| Random + rej (control) | 0.001 | - |" in out and "ReLU (no norm)" not in out  # not measured
    with pytest.raises(SystemExit, match="does not exist"):
        main(["report", "table2", str(tmp_path / "nope")])
    stray = tmp_path / "run1" / "result.json"  # a train.py run of its own, not a grid cell
    stray.parent.mkdir()
    stray.write_text((next(tmp_path.rglob("seed0/result.json"))).read_text())
    with pytest.raises(SystemExit, match=rf"{stray}' is not in a grid's layout"):
        main(["report", "table2", str(tmp_path)])


def test_every_table_layer_label_is_known():
    for table in TABLES.values():
        assert set(table.layers) <= set(LAYERS)


def test_mini_scale_maps_models_to_anchors(capsys):
    main(["run", "table2", "--scale", "mini", "--dry-run", "--layers", "bn_relu", "evonorm_b0"])
    out = capsys.readouterr().out
    assert "no CIFAR anchor for resnet101, mnasnet_b1, efficientnet_b5" in out
    assert "[30/30] efficientnet_cifar evonorm_b0 1 x 128 images = 128, LR 0.05, seed 4" in out  # 3 models x 2 x 5 seeds
    main(["run", "table3", "--scale", "mini", "--dry-run", "--models", "mobilenetv2", "--layers", "frn",
          "--batches", "128", "2", "--seeds", "0", "1"])
    assert "[4/4] mobilenetv2_cifar frn 8 x 2 images = 16, LR 0.001875, seed 1" in capsys.readouterr().out


def test_mini_scale_on_cifar10_needs_its_folder(tmp_path):

    scale = MiniScale(data="cifar10", data_dir="/data/c10", **CIFAR10_FRAMING)
    config = mini_config(TABLES["table3"], Cell("resnet50", "BN-ReLU", 16), scale, tmp_path)
    assert (config.data, config.data_dir, config.batch_size) == ("cifar10", "/data/c10", 16)
    assert (config.image_size, config.crop_size, config.validation) == (32, 24, "full")
    with pytest.raises(SystemExit, match="CIFAR-10 not found at .*nope"):
        main(["run", "table3", "--scale", "mini", "--data", "cifar10", "--data-dir", str(tmp_path / "nope"),
              "--runs-dir", str(tmp_path / "runs")])


def test_diverged_runs_are_reported_as_such(tmp_path):
    folder = tmp_path / "resnet50_cifar" / "frn" / "b2" / "seed0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": "resnet50_cifar", "norm_act": "frn", "seed": 0},
                                                    "final_top1": None, "diverged": "loss became nan"}))
    assert "0.0 (n=1), diverged (1/1) counted as 0" in report_markdown(TABLES["table3"], load_results(tmp_path))


def test_diverged_runs_count_as_zero_beside_the_others():
    assert format_measured([98.0, float("nan")]) == "49.0 ± 69.3 (n=2), diverged (1/2) counted as 0"
    assert format_measured([97.0, 99.0]) == "98.0 ± 1.4 (n=2)"


# The paper's training setup of every table (section 5.1 and the NeurIPS appendix), typed from the
# text: base LR per 256 images, schedule, images per worker, workers, resolution, RandAugment and
# epochs/stages where the paper states them. Unstated values are this suite's documented choices
# (ResNet 90 epochs with stages at 30/60/80, MobileNet/EfficientNet 350 epochs).
PAPER_SETUP = {
    "resnet50": dict(base_lr=0.1, schedule="multistep", workers=8, resolution=224, epochs=90, milestones=(30, 60, 80)),
    "resnet101": dict(base_lr=0.1, schedule="multistep", workers=8, resolution=224, epochs=90, milestones=(30, 60, 80)),
    "mobilenetv2": dict(base_lr=0.1, schedule="cosine", workers=32, resolution=224, epochs=350),
    "mnasnet_b1": dict(base_lr=0.1, schedule="cosine", workers=32, resolution=224, epochs=350),
    "efficientnet_b0": dict(base_lr=0.016, schedule="polynomial", workers=32, resolution=224, epochs=350),
    "efficientnet_b5": dict(base_lr=0.016, schedule="polynomial", workers=32, resolution=456, epochs=350,
                            batch_per_worker=64),
}
TABLE_SETUP = {
    "table2": {},
    "table3": {"resnet50": dict(randaugment=True), "mobilenetv2": dict(base_lr=0.03)},
    "table9": {},
    "table10": {"resnet50": dict(randaugment=True)},
    "table11": {"resnet50": dict(randaugment=True, epochs=180, milestones=(60, 120, 160))},
    "table12": {"resnet50": dict(randaugment=True, epochs=180, schedule="cosine")},
    "table13": {"mobilenetv2": dict(base_lr=0.03)},
}


def all_cells():
    for key, table in TABLES.items():
        for cell in cells(table, None, (0,)):
            yield key, cell


@pytest.mark.parametrize("key,cell", list(all_cells()), ids=lambda v: v if isinstance(v, str) else
                         f"{v.model}-{v.label}-{v.batch}")
def test_every_cell_trains_with_the_papers_whole_recipe(key, cell, tmp_path):
    """The command a cell runs, parsed by classification/train.py, resolves every recipe field as the paper says."""

    command = paper_command(TABLES[key], cell, tmp_path / "runs", str(tmp_path))
    argv = command[command.index("evonorm_suite.classification.train") + 1:]
    recipe = resolve_recipe(config_from_argv(argv))
    expected = {"batch_per_worker": 128, "randaugment": False, "warmup_epochs": 5.0,
                **PAPER_SETUP[cell.model], **TABLE_SETUP[key].get(cell.model, {})}
    if cell.batch is not None:
        expected["batch_per_worker"] = cell.batch
    for field, value in expected.items():
        assert getattr(recipe, field) == value, (field, getattr(recipe, field), value)
    nodes, per_node = (1, 8) if cell.model.startswith("resnet") else (4, 8)
    assert f"--nnodes={nodes}" in command and f"--nproc_per_node={per_node}" in command


def test_unknown_models_and_layers_are_errors(tmp_path):
    with pytest.raises(SystemExit, match="--models nope: not in this table; accepted: resnet50, mobilenetv2"):
        main(["run", "table3", "--scale", "mini", "--models", "nope", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="--layers nope: not in this table"):
        main(["run", "table3", "--scale", "mini", "--layers", "nope", "--dry-run", "--runs-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_a_curves_panel_of_table2_names_its_runs_step():
    """Table 2's cells are named by no batch, and its anchors train with different steps (ResNet50-CIFAR 8 x 32, the
    others 1 x 128): a learning-curve panel is titled by its runs' workers x images, read from their configs."""
    assert step_words({"BN-ReLU": [], "EvoNorm-B0": [{"config": {"workers": 8, "batch_size": 32}}]}) == "8 x 32 images"
    assert step_words({"BN-ReLU": [{"config": {"batch_size": 128}}]}) == "1 x 128 images"  # recorded before workers
    assert step_words({"BN-ReLU": [{"config": {"model": "resnet50"}}]}) == step_words({}) == "recipe batch"


def test_report_writes_a_json_summary_and_learning_curves(fixture_runs, tmp_path):
    for result in fixture_runs.rglob("result.json"):
        data = json.loads(result.read_text())
        data["config"]["seed"] = int(result.parent.name[4:])
        data["history"] = [{"epoch": 1, "top1": data["final_top1"] - 5}, {"epoch": 2, "top1": data["final_top1"]}]
        result.write_text(json.dumps(data))
    main(["report", "table3", str(fixture_runs), "--json", str(tmp_path / "t3.json")])
    cells_out = json.loads((tmp_path / "t3.json").read_text())["cells"]
    bn2 = next(c for c in cells_out if c["layer"] == "bn_relu" and c["batch"] == 2)
    assert bn2["seeds"] == [0, 1] and bn2["final_top1"] == [60.0, 62.0] and bn2["mean"] == 61.0
    assert bn2["paper"] is None and bn2["curves"] == [[55.0, 60.0], [57.0, 62.0]]  # the paper stops at 4
    assert next(c for c in cells_out if c["layer"] == "bn_relu" and c["batch"] == 128)["paper"] == 76.1
    assert bn2["flatness"] == [{"points": 2, "range": 5.0, "slope": 5.0}] * 2 and bn2["last_fifth_range_max"] == 5.0
    assert not bn2["control"] and bn2["workers"] == 1  # a result without workers: one
    assert (fixture_runs / "table3_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_controls_are_reported_as_such(fixture_runs, tmp_path, capsys):
    """A measured control row appears after the table's rows, marked "(control)", without a paper number, and
    its JSON cell says control; the convergence table shows each cell's largest last-fifth range."""
    for seed, curve in ((0, [10.0, 11.0, 10.5, 12.0, 11.0]), (1, [10.0, 10.0, 10.0, 10.0, 10.0])):
        write_run(fixture_runs, "resnet50_cifar", "no_norm_relu", "b128", seed, curve[-1])
        result = fixture_runs / "resnet50_cifar" / "no_norm_relu" / "b128" / f"seed{seed}" / "result.json"
        data = json.loads(result.read_text())
        data["config"].update(workers=8)
        data["history"] = [{"epoch": e + 1, "top1": v} for e, v in enumerate(curve)]
        result.write_text(json.dumps(data))
    for result in fixture_runs.rglob("result.json"):
        data = json.loads(result.read_text())
        data["config"]["seed"] = int(result.parent.name[4:])
        result.write_text(json.dumps(data))
    main(["report", "table3", str(fixture_runs), "--json", str(tmp_path / "t3.json")])
    out = capsys.readouterr().out
    assert "| ReLU (no norm) (control) | - | - | - | - | - | - | 10.5 ± 0.7 (n=2) | - |" in out
    assert "| ReLU (no norm) (control) | 1.00 | - |" in out  # last two epochs of seed 0: 12 and 11
    assert "Random + rej" not in out  # not measured
    control = next(c for c in json.loads((tmp_path / "t3.json").read_text())["cells"] if c["layer"] == "no_norm_relu")
    assert control["control"] and control["label"] == "ReLU (no norm)" and control["workers"] == 8
    assert control["last_fifth_range_max"] == 1.0


def test_mini_scale_cells_train_the_documented_reduced_recipe(tmp_path):
    """MiniScale (docs/classification.md): Table 3 at 32, 16, 8, 4 images per worker on 8 simulated workers,
    5 seeds, 15 epochs (the first a linear warmup, then cosine) at the paper's 0.1 per 256 images, 24 px crops of the
    28 px MNIST digits validated on the centre 24, anchors at the paper's depth; Table 2 trains ResNet50-CIFAR as
    Table 3's column of 32 images per worker and the other anchors as one worker of 128 images; every cell
    trains in its own folder, resuming once started."""

    scale = MiniScale()
    assert (scale.batches, scale.workers, scale.table2_batch, scale.table2_on_workers) == (
        (32, 16, 8, 4), 8, 128, ("resnet50",))
    assert (scale.seeds, scale.epochs, scale.base_lr) == ((0, 1, 2, 3, 4), 15.0, 0.1)
    assert (scale.data, scale.image_size, scale.crop_size, scale.validation, scale.anchor_depth) == (
        "mnist", 28, 24, "centre", 1.0)
    config = mini_config(TABLES["table3"], Cell("resnet50", "EvoNorm-S0", 4, seed=2), scale, tmp_path)
    assert (config.model, config.norm_act, config.batch_size, config.workers, config.seed) == (
        "resnet50_cifar", "evonorm_s0", 4, 8, 2)
    assert (config.epochs, config.base_lr, config.schedule, config.warmup_epochs) == (15.0, 0.1, "cosine", 1.0)
    assert (config.data, config.image_size, config.crop_size, config.validation) == ("mnist", 28, 24, "centre")
    assert (config.anchor_depth, config.resume) == (1.0, False)
    assert config.output_dir == str(tmp_path / "resnet50" / "evonorm_s0" / "b4" / "seed2")
    open_run(config.output_dir, RUN_KIND, config).close()  # started
    assert mini_config(TABLES["table3"], Cell("resnet50", "EvoNorm-S0", 4, seed=2), scale, tmp_path).resume
    table2 = mini_config(TABLES["table2"], Cell("efficientnet_b0", "BN-Swish", None), scale, tmp_path)
    assert (table2.model, table2.batch_size, table2.workers) == ("efficientnet_cifar", 128, 1)
    assert table2.output_dir == str(tmp_path / "efficientnet_b0" / "bn_swish" / "recipe" / "seed0")


@pytest.mark.parametrize("table, model, label, batch, expected", [
    # Table 3: 8 workers x images per worker; LR = base x total / 256, MobileNetV2's base 0.03 for every row
    ("table3", "resnet50", "BN-ReLU", 32, (8, 32, 256, 0.1)),
    ("table3", "resnet50", "GN-ReLU", 4, (8, 4, 32, 0.0125)),
    ("table3", "mobilenetv2", "BN-ReLU", 32, (8, 32, 256, 0.03)),
    ("table3", "mobilenetv2", "EvoNorm-S0", 4, (8, 4, 32, 0.00375)),
    ("table3", "mobilenetv2", "ReLU (no norm)", 8, (8, 8, 64, 0.0075)),
    # Table 2 at the paper's 0.1 per 256 for both anchors: ResNet50-CIFAR as Table 3's first column (8 x 32), the
    # other anchors as one worker of 128 images
    ("table2", "resnet50", "EvoNorm-B0", None, (8, 32, 256, 0.1)),
    ("table2", "resnet50", "ReLU (no norm)", None, (8, 32, 256, 0.1)),
    ("table2", "mobilenetv2", "Random + rej", None, (1, 128, 128, 0.05)),
    ("table2", "efficientnet_b0", "BN-Swish", None, (1, 128, 128, 0.05)),
])
def test_mini_grid_cells_have_the_stated_workers_batches_and_lr(table, model, label, batch, expected, tmp_path):

    config = mini_config(TABLES[table], Cell(model, label, batch), MiniScale(), tmp_path)
    step = step_settings(config)
    assert (step["workers"], step["images_per_worker"], step["total_batch"]) == expected[:3]
    assert step["peak_lr"] == pytest.approx(expected[3], rel=1e-12)


@pytest.mark.forks_autograd
def test_the_mini_grid_trains_each_cell_once_with_its_log(tmp_path, capsys):
    argv = ["run", "table3", "--scale", "mini", "--models", "resnet50", "--layers", "evonorm_s0", "--batches", "16",
            "--seeds", "0", "--epochs", "0.2", "--anchor-depth", "0.01", "--runs-dir", str(tmp_path)]
    assert main(argv) == 0
    cell = tmp_path / "resnet50" / "evonorm_s0" / "b16" / "seed0"
    result = json.loads((cell / "result.json").read_text())
    # an epoch of 4,000 digits at 8 x 16 = 128 images per step is 31 steps: 0.2 epochs stop at step 7 (6.2 rounded
    # up), where the cosine schedule ends
    assert result["steps"] == 7 and result["config"]["model"] == "resnet50_cifar" and result["total_batch"] == 128
    assert result["device"] == THIS_MACHINE
    assert "resnet50_cifar evonorm_s0 8 x 16 images = 128, LR 0.05, seed 0: top-1" in (
        cell.parent / "seed0.log").read_text()
    assert "[table3 mini] 1/1 cells (100%)" in capsys.readouterr().out
    assert main(argv) == 0
    assert "1 cells: 1 finished before, 0 to run" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"b16/seed0/result.json is a finished run of other settings: epochs 0.2 "
                                         r"\(wanted 0.4\); give another --runs-dir"):
        main([*argv, "--epochs", "0.4"])  # not skipped as if it were the longer run


def test_each_summary_cell_records_the_settings_it_was_trained_with(tmp_path):
    """A cell's ``setting`` is its seeds' SETTING_KEYS, None where a run did not record one (runs of an earlier
    grid); seeds of one cell trained with different settings are an error naming the cell."""

    wanted = MiniScale().setting(TABLES["table3"], "resnet50", 4)
    config = config_to_dict(mini_config(TABLES["table3"], Cell("resnet50", "GN-ReLU", 4), MiniScale(), tmp_path))
    for seed, epochs in ((0, 15.0), (1, 15.0)):
        write_run(tmp_path, "resnet50_cifar", "gn_relu", "b4", seed, 90.0)
        result = tmp_path / "resnet50_cifar" / "gn_relu" / "b4" / f"seed{seed}" / "result.json"
        result.write_text(json.dumps({"config": {**config, "seed": seed, "epochs": epochs}, "final_top1": 90.0}))
    write_run(tmp_path, "resnet50_cifar", "bn_relu", "b4", 0, 80.0)  # an earlier grid's run: no settings recorded
    earlier = tmp_path / "resnet50_cifar" / "bn_relu" / "b4" / "seed0" / "result.json"
    earlier.write_text(json.dumps({"config": {"model": "resnet50_cifar", "norm_act": "bn_relu", "seed": 0},
                                   "final_top1": 80.0}))
    cells_out = {c["layer"]: c for c in summary(TABLES["table3"], tmp_path)["cells"]}
    assert cells_out["gn_relu"]["setting"] == {key: wanted[key] for key in SETTING_KEYS}
    assert cells_out["bn_relu"]["setting"] == dict.fromkeys(SETTING_KEYS)
    result.write_text(json.dumps({"config": {**config, "seed": 1, "epochs": 10.0}, "final_top1": 90.0}))
    with pytest.raises(CorruptFileError, match="resnet50 gn_relu batch 4: its seeds were trained with different"):
        summary(TABLES["table3"], tmp_path)


def test_paper_value_reads_the_column_of_the_batch():
    """Batches are columns 128, 64, 32, 16, 8, 4 (Table 3's R-50 BN-ReLU: 76.1 76.2 76.1 75.6 74.3 70.7); a
    batch the paper did not run has no value; Table 2 has one value per cell."""
    table3 = TABLES["table3"]
    assert [table3.paper_value("resnet50", "BN-ReLU", b) for b in (128, 64, 32, 16, 8, 4)] == [
        76.1, 76.2, 76.1, 75.6, 74.3, 70.7]
    assert table3.paper_value("resnet50", "BN-ReLU", 2) is None
    assert table3.paper_value("resnet101", "BN-ReLU", 128) is None
    assert TABLES["table2"].paper_value("mobilenetv2", "EvoNorm-B0") == 75.1


def test_summary_lists_cells_largest_batch_first_and_averages_finite_runs(fixture_runs):
    """Per (model, layer): batches from largest to smallest; mean and std over the finished seeds, a diverged
    seed counted apart (not averaged as 0 or NaN)."""

    folder = fixture_runs / "resnet50_cifar" / "bn_relu" / "b16" / "seed0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": "resnet50_cifar", "norm_act": "bn_relu",
                                                               "seed": 0}, "final_top1": None}))
    write_run(fixture_runs, "resnet50_cifar", "bn_relu", "b16", 1, 70.0)
    for result in fixture_runs.rglob("result.json"):
        data = json.loads(result.read_text())
        data["config"]["seed"] = int(result.parent.name[4:])
        result.write_text(json.dumps(data))
    cells_out = summary(TABLES["table3"], fixture_runs)["cells"]
    assert [(c["layer"], c["batch"]) for c in cells_out] == [
        ("bn_relu", 128), ("bn_relu", 16), ("bn_relu", 2), ("evonorm_s0", 128), ("evonorm_s0", 2)]
    b16 = cells_out[1]
    assert (b16["diverged"], b16["mean"], b16["final_top1"], b16["paper"]) == (1, 70.0, [None, 70.0], 75.6)
    assert b16["devices"] == {"not recorded": 2}
    assert cells_out[0]["std"] == pytest.approx(2 ** 0.5)  # 90 and 92: sample std
    assert cells_out[0]["label"] == "BN-ReLU"


def test_list_names_every_table_with_its_grid(capsys):
    main(["list"])
    out = capsys.readouterr().out
    assert "table2   6 models x 10 layers; miniature controls: ReLU (no norm), Random + rej" in out
    assert "table3   2 models x 7 layers x 6 batch sizes (128, 64, 32, 16, 8, 4); miniature controls" in out
    assert "table13  1 models x 6 layers" in out


def test_a_curve_of_some_diverged_seeds_says_how_many_it_shows():
    """Diverged runs have no history: the mean curve is over the others and its label says so, and a control
    stays dashed whatever its label."""
    runs = [{"history": [{"top1": 10.0}, {"top1": 50.0}]}, {"history": [{"top1": 30.0}, {"top1": 70.0}]},
            {"final_top1": None, "diverged": "loss became nan at step 3"}]
    curve = mean_curve(runs, "ReLU (no norm)")
    assert curve.label == "ReLU (no norm) (2 of 3 seeds; 1 diverged)" and curve.dashed
    assert curve.y == [20.0, 60.0]
    assert mean_curve(runs[:2], "BN-ReLU").label == "BN-ReLU" and not mean_curve(runs[:2], "BN-ReLU").dashed
    every_seed_diverged = mean_curve(runs[2:] * 5, "ReLU (no norm)")
    assert every_seed_diverged.label == "ReLU (no norm) (5 of 5 seeds diverged)" and every_seed_diverged.dashed
    assert every_seed_diverged.x == [] and every_seed_diverged.y == []
    assert mean_curve([], "ReLU (no norm)") is None


def test_a_curve_of_fewer_seeds_than_its_panel_says_how_many_ran():
    """A cell still running (4 of the panel's 5 seeds) is labelled so, with its diverged runs."""
    trained = {"history": [{"top1": 10.0}, {"top1": 50.0}]}
    diverged = {"final_top1": None, "diverged": "loss became nan at step 3"}
    assert mean_curve([trained] * 4, "Random + rej", seeds=5).label == "Random + rej (4 of 5 seeds run)"
    assert mean_curve([trained] * 5, "Random + rej", seeds=5).label == "Random + rej"
    assert mean_curve([trained, diverged], "ReLU (no norm)", seeds=5).label == "ReLU (no norm) (2 of 5 seeds run; 1 diverged)"
    assert mean_curve([diverged], "ReLU (no norm)", seeds=5).label == "ReLU (no norm) (1 of 5 seeds run; 1 diverged)"


def test_a_layer_whose_every_seed_diverged_is_in_the_plot_legend(tmp_path, monkeypatch):
    """The learning-curve panel names a layer that never trained (an empty curve in the legend), so a
    control missing from the plot is not mistaken for a control that was not run."""
    from matplotlib.figure import Figure

    legends = []
    save = Figure.savefig

    def record_legend_then_save(figure, *args, **kwargs):
        for ax in figure.axes:
            legend = ax.get_legend()
            legends.extend((t.get_text(), tuple(h.get_color().ravel())) for t, h in zip(legend.get_texts(),
                                                                                       legend.legend_handles))
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record_legend_then_save)
    trained = [{"history": [{"top1": 40.0}, {"top1": 90.0}]}]
    diverged = [{"final_top1": None, "diverged": "loss became nan at step 6"}]
    panels = {"resnet": [mean_curve(trained, "BN-ReLU"), mean_curve(trained + diverged, "ReLU (no norm)")],
              "mobilenet": [mean_curve(trained, "BN-ReLU"), mean_curve(diverged * 3, "ReLU (no norm)")]}
    path = plot_series(tmp_path / "curves.png", panels, xlabel="epoch", ylabel="top-1")
    assert path.read_bytes()[:4] == b"\x89PNG"
    labels = [label for label, _ in legends]
    assert labels == ["BN-ReLU", "ReLU (no norm) (1 of 2 seeds; 1 diverged)", "BN-ReLU",
                      "ReLU (no norm) (3 of 3 seeds diverged)"]
    colors = [color for _, color in legends]
    assert colors[0] == colors[2] and colors[1] == colors[3] != colors[0]  # one colour per layer in both panels
