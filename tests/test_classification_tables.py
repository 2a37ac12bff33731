"""The paper's tables as grids: stored numbers, commands, and the report from a fixture run directory."""
import json
from pathlib import Path

import pytest

from classification.paper_tables import LAYERS, TABLES
from classification.tables import Cell, cells, load_results, main, paper_command, report_markdown


@pytest.mark.parametrize("table, model, label, batch, value", [
    ("table2", "resnet50", "BN-ReLU", None, 76.1),
    ("table2", "resnet101", "EvoNorm-B0", None, 79.1),
    ("table2", "mobilenetv2", "EvoNorm-B0", None, 75.1),
    ("table2", "mnasnet_b1", "BN-Swish", None, 75.3),
    ("table2", "efficientnet_b0", "BN-Swish-1", None, 77.0),
    ("table2", "efficientnet_b5", "RS + rej", None, 83.2),
    ("table2", "mobilenetv2", "Random + rej", None, 1e-3),
    ("table3", "resnet50", "BN-ReLU", 4, 70.7),
    ("table3", "resnet50", "EvoNorm-S0", 32, 77.6),
    ("table3", "mobilenetv2", "BN-ReLU", 8, 64.5),
    ("table3", "mobilenetv2", "GN-Swish", 8, 74.0),
    ("table9", "resnet50", "EvoNorm-S2", 32, 76.4),
    ("table9", "resnet50", "BN-ReLU", 64, 76.4),
    ("table10", "resnet50", "FRN", 4, 76.0),
    ("table11", "resnet50", "BN-ReLU", 4, 72.0),
    ("table11", "resnet50", "EvoNorm-S0", 16, 78.1),
    ("table12", "resnet50", "EvoNorm-S0", 32, 78.4),
    ("table12", "resnet50", "GN-ReLU", 128, 77.1),
    ("table13", "mobilenetv2", "BN-ReLU", 4, 60.4),
    ("table13", "mobilenetv2", "EvoNorm-S1", 64, 74.0),
])
def test_tables_hold_the_paper_numbers(table, model, label, batch, value):
    assert TABLES[table].paper_value(model, label, batch) == value


def test_grid_shapes():
    assert len(TABLES["table2"].accuracy) == 6 * 10
    assert len(TABLES["table3"].accuracy) == 2 * 7
    for key in ("table9", "table10", "table11", "table12", "table13"):
        assert len(TABLES[key].accuracy) == 6 and TABLES[key].batches == (128, 64, 32, 16, 8, 4)
    assert len(cells(TABLES["table3"], None, (0, 1))) == 2 * 7 * 6 * 2
    assert len(cells(TABLES["table2"], None, (0,))) == 6 * 8  # Random and Random + rej are not layers


def test_paper_commands_use_the_papers_workers_and_recipe():
    r50 = paper_command(TABLES["table11"], Cell("resnet50", "EvoNorm-S0", 4), Path("r"), "/in")
    assert "--nproc_per_node=8" in r50 and "--nnodes=1" in r50 and "--randaugment" in r50
    assert r50[r50.index("--epochs") + 1] == "180" and r50[r50.index("--batch-size") + 1] == "4"
    mbv2 = paper_command(TABLES["table13"], Cell("mobilenetv2", "FRN", 16), Path("r"), "/in")
    assert "--nnodes=4" in mbv2 and "--randaugment" not in mbv2


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
    assert "| EvoNorm-B0 | 76.8 | 80.0 |" in out and "| Random | 0.001 | n/a |" in out
    with pytest.raises(SystemExit, match="does not exist"):
        main(["report", "table2", str(tmp_path / "nope")])


def test_every_table_layer_label_is_known():
    for table in TABLES.values():
        assert set(table.layers) <= set(LAYERS)


def test_mini_scale_maps_models_to_anchors(capsys):
    main(["run", "table2", "--scale", "mini", "--dry-run", "--layers", "bn_relu", "evonorm_b0"])
    out = capsys.readouterr().out
    assert "no CIFAR anchor for resnet101, mnasnet_b1, efficientnet_b5" in out
    assert "[6/6] efficientnet_cifar evonorm_b0 batch 128 seed 0" in out
    main(["run", "table3", "--scale", "mini", "--dry-run", "--models", "mobilenetv2", "--layers", "frn",
          "--batches", "128", "2", "--seeds", "0", "1"])
    assert "[4/4] mobilenetv2_cifar frn batch 2 seed 1" in capsys.readouterr().out


def test_diverged_runs_are_reported_as_such(tmp_path):
    folder = tmp_path / "resnet50_cifar" / "frn" / "b2" / "seed0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"model": "resnet50_cifar", "norm_act": "frn"},
                                                    "final_top1": None, "diverged": "loss became nan"}))
    assert "diverged (1/1)" in report_markdown(TABLES["table3"], load_results(tmp_path))
