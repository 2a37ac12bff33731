"""The paper's tables as grids: stored numbers, commands, and the report from a fixture run directory."""
import json
from pathlib import Path

import pytest

from evonorm_core.experiment.rundir import open_run
from evonorm_suite.classification.paper_tables import LAYERS, TABLES
from evonorm_suite.classification.train import RUN_KIND

from . import paper_classification_tables as paper
from evonorm_suite.classification.tables import Cell, cells, load_results, main, paper_command, report_markdown


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
    assert len(cells(TABLES["table2"], None, (0,))) == 6 * 8  # Random and Random + rej are not layers


def test_paper_commands_pass_the_table_and_batch():
    r50 = paper_command(TABLES["table11"], Cell("resnet50", "EvoNorm-S0", 4), Path("r"), "/in")
    assert r50[r50.index("--table") + 1] == "table11" and r50[r50.index("--batch-size") + 1] == "4"
    assert "--resume" not in r50 and r50[r50.index("--data-dir") + 1] == "/in"  # nothing started in r/ yet


def write_run(root, model, layer, batch, seed, top1):
    folder = root / model / layer / batch / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": model, "norm_act": layer}, "final_top1": top1}))


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


def test_table2_report_and_missing_dir(tmp_path, capsys):
    write_run(tmp_path, "efficientnet_cifar", "evonorm_b0", "recipe", 0, 80.0)
    main(["report", "table2", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| EvoNorm-B0 | 76.8 | 80.0 (n=1) |" in out and "| Random | 0.001 | n/a |" in out
    with pytest.raises(SystemExit, match="does not exist"):
        main(["report", "table2", str(tmp_path / "nope")])


def test_every_table_layer_label_is_known():
    for table in TABLES.values():
        assert set(table.layers) <= set(LAYERS)


def test_mini_scale_maps_models_to_anchors(capsys):
    main(["run", "table2", "--scale", "mini", "--dry-run", "--layers", "bn_relu", "evonorm_b0"])
    out = capsys.readouterr().out
    assert "no CIFAR anchor for resnet101, mnasnet_b1, efficientnet_b5" in out
    assert "[18/18] efficientnet_cifar evonorm_b0 batch 128 seed 2" in out
    main(["run", "table3", "--scale", "mini", "--dry-run", "--models", "mobilenetv2", "--layers", "frn",
          "--batches", "128", "2", "--seeds", "0", "1"])
    assert "[4/4] mobilenetv2_cifar frn batch 2 seed 1" in capsys.readouterr().out


def test_mini_scale_on_cifar10_needs_its_folder(tmp_path):
    from evonorm_suite.classification.tables import Cell, MiniScale, mini_config

    config = mini_config(Cell("resnet50", "BN-ReLU", 16), MiniScale(data="cifar10", data_dir="/data/c10"), tmp_path)
    assert (config.data, config.data_dir, config.batch_size) == ("cifar10", "/data/c10", 16)
    with pytest.raises(SystemExit, match="CIFAR-10 not found at .*nope"):
        main(["run", "table3", "--scale", "mini", "--data", "cifar10", "--data-dir", str(tmp_path / "nope"),
              "--runs-dir", str(tmp_path / "runs")])


def test_diverged_runs_are_reported_as_such(tmp_path):
    folder = tmp_path / "resnet50_cifar" / "frn" / "b2" / "seed0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": "resnet50_cifar", "norm_act": "frn"},
                                                    "final_top1": None, "diverged": "loss became nan"}))
    assert "diverged (1/1)" in report_markdown(TABLES["table3"], load_results(tmp_path))


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
    from evonorm_suite.classification.train import config_from_argv, resolve_recipe

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
    assert (fixture_runs / "table3_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_mini_scale_cells_train_the_documented_reduced_recipe(tmp_path):
    """MiniScale (docs/classification.md): batches 128, 16, 4, 2 per step, seeds 0-2, 10 epochs of cosine
    without warmup at the paper's 0.1 per 256 images, 16x16 digits, one block per anchor stage; a cell of
    Table 2 (no batch sweep) trains at 128, and every cell trains in its own folder, resuming once started."""
    from evonorm_suite.classification.tables import MiniScale, mini_config

    scale = MiniScale()
    assert (scale.batches, scale.seeds, scale.epochs, scale.base_lr) == ((128, 16, 4, 2), (0, 1, 2), 10.0, 0.1)
    assert (scale.image_size, scale.anchor_depth, scale.data) == (16, 0.01, "digits")
    config = mini_config(Cell("mobilenetv2", "EvoNorm-S0", 4, seed=2), scale, tmp_path)
    assert (config.model, config.norm_act, config.batch_size, config.seed) == ("mobilenetv2_cifar", "evonorm_s0", 4, 2)
    assert (config.epochs, config.base_lr, config.schedule, config.warmup_epochs) == (10.0, 0.1, "cosine", 0.0)
    assert (config.image_size, config.anchor_depth, config.resume) == (16, 0.01, False)
    assert config.output_dir == str(tmp_path / "mobilenetv2" / "evonorm_s0" / "b4" / "seed2")
    open_run(config.output_dir, RUN_KIND, config).close()  # started
    assert mini_config(Cell("mobilenetv2", "EvoNorm-S0", 4, seed=2), scale, tmp_path).resume
    table2 = mini_config(Cell("efficientnet_b0", "BN-Swish", None), scale, tmp_path)
    assert table2.model == "efficientnet_cifar" and table2.batch_size == 128
    assert table2.output_dir == str(tmp_path / "efficientnet_b0" / "bn_swish" / "recipe" / "seed0")


def test_the_mini_grid_trains_each_cell_once_with_its_log(tmp_path, capsys):
    argv = ["run", "table3", "--scale", "mini", "--models", "resnet50", "--layers", "evonorm_s0", "--batches", "128",
            "--seeds", "0", "--epochs", "0.2", "--runs-dir", str(tmp_path)]
    assert main(argv) == 0
    cell = tmp_path / "resnet50" / "evonorm_s0" / "b128" / "seed0"
    result = json.loads((cell / "result.json").read_text())
    assert result["steps"] == 11 and result["config"]["model"] == "resnet50_cifar"  # one (partial) epoch
    assert "resnet50_cifar evonorm_s0 batch 128 seed 0: top-1" in (cell.parent / "seed0.log").read_text()
    assert "[table3 mini] 1/1 cells (100%)" in capsys.readouterr().out
    assert main(argv) == 0
    assert "1 cells: 1 finished before, 0 to run" in capsys.readouterr().out


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
    from evonorm_suite.classification.tables import summary

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
    assert cells_out[0]["std"] == pytest.approx(2 ** 0.5)  # 90 and 92: sample std
    assert cells_out[0]["label"] == "BN-ReLU"


def test_list_names_every_table_with_its_grid(capsys):
    main(["list"])
    out = capsys.readouterr().out
    assert "table2   6 models x 10 layers (8 runnable)" in out
    assert "table3   2 models x 7 layers (7 runnable) x 6 batch sizes (128, 64, 32, 16, 8, 4)" in out
    assert "table13  1 models x 6 layers (6 runnable)" in out
