"""tools/reproduce.py: the verdict rule, the commands it runs, and a report from no results."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reproduce():
    spec = importlib.util.spec_from_file_location("reproduce_tool", ROOT / "tools" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_verdict_needs_the_difference_to_exceed_the_larger_spread(reproduce):
    wide, narrow = [70.0, 80.0, 90.0], [74.0, 75.0, 76.0]  # stdev 10 and 1
    assert reproduce.verdict([92.0, 93.0, 94.0], narrow) == "holds"
    assert reproduce.verdict(narrow, [92.0, 93.0, 94.0]) == "does not hold"
    assert reproduce.verdict(wide, narrow) == "not resolved at this scale"
    assert reproduce.verdict(narrow, wide, no_worse=True) == "holds"  # 5 below, within the spread of 10
    assert reproduce.verdict([60.0, 61.0, 62.0], narrow, no_worse=True) == "does not hold"
    assert reproduce.verdict([], narrow) == "not measured"


def test_dry_run_shows_the_selected_models_and_layers(reproduce, capsys):
    assert reproduce.main(["--only", "table3", "--models", "resnet50", "--layers", "bn_relu", "evonorm_s0",
                           "--dry-run"]) == 0
    run, report = capsys.readouterr().out.splitlines()
    assert "classification/tables.py run table3 --scale mini --models resnet50 --layers bn_relu evonorm_s0" in run
    assert "classification/tables.py report table3" in report and "--json docs/results/classification/table3.json" in report


def test_report_from_no_results_names_the_command_of_each_experiment(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    assert reproduce.main(["--report-only"]) == 0
    text = (tmp_path / "docs" / "reproduction.md").read_text()
    for command in ("python tools/reproduce.py --only table2", "python tools/reproduce.py --only table3",
                    "python tools/reproduce.py --only table4", "python gan/table5.py", "python search/compare.py"):
        assert f"**Not measured yet**: run `{command}" in text


def test_fig10_row_shows_how_many_layers_each_seed_accepted(reproduce):
    """A top-10 mean over two layers must not read as one over ten: the count and best sit beside it."""
    result = {"seeds": [0, 1, 2], "top10_final": [0.90, None, 0.80], "distinct_accepted": [12, 0, 2],
              "best_final": [0.96, None, 0.95]}
    strategy, seeds, top10, distinct, best = reproduce.fig10_row("random", result)
    assert (strategy, seeds, distinct) == ("random", 3, "12 / 0 / 2")
    assert top10 == "85.0 ± 7.1 (n=2)"  # the seed that accepted nothing has no top-10 mean
    assert best == "95.5 ± 0.7 (n=2)"
