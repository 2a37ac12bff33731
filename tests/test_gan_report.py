"""Table 5 aggregation: median/best over seeds per layer, next to the paper's numbers (gan/table5.py's grid:
tests/test_gan_table5.py)."""
import json

import pytest

from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.rundir import RUN_FILE
from evonorm_suite.gan import report
from evonorm_suite.gan.checkpoint import RUN_KIND


def write_run(root, norm, seed, is_mean, fid, **options):
    run = root / f"{norm}" / f"seed{seed}"
    run.mkdir(parents=True)
    metrics = dict(is_mean=is_mean, is_std=1.0, fid=fid, norm=norm, norm_options=options, step=1000, num_samples=50000,
                   feature_extractor="inception-v3-compat", sampling="eval mode, moving statistics", seed=seed,
                   dataset="imagenet", resolution=128)
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / RUN_FILE).write_text(json.dumps(RUN_KIND.manifest()))


def test_report_aggregates_three_seeds_into_median_and_best(tmp_path, capsys):
    for seed, (score, fid) in enumerate([(100.0, 7.0), (110.0, 6.0), (90.0, 9.0)]):
        write_run(tmp_path, "evonorm_s0", seed, score, fid)
    for seed, (score, fid) in enumerate([(80.0, 9.0), (85.0, 8.5), (70.0, 11.0)]):
        write_run(tmp_path, "gn_relu", seed, score, fid, groups=16)
    out = tmp_path / "table.md"
    report.main([str(tmp_path), "--out", str(out), "--json", str(tmp_path / "table.json"), "--plot",
                 str(tmp_path / "table.png")])
    assert (tmp_path / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads((tmp_path / "table.json").read_text())["layers"]
    s0 = rows["evonorm_s0"]
    assert (s0["seeds"], s0["is_median"], s0["is_best"], s0["fid_median"], s0["fid_best"]) == ([0, 1, 2], 100.0, 110.0, 7.0, 6.0)
    assert s0["fid"] == [7.0, 6.0, 9.0] and s0["is"] == [100.0, 110.0, 90.0]
    gn = rows["gn_relu(groups=16)"]
    assert (gn["is_median"], gn["is_best"], gn["fid_median"], gn["fid_best"]) == (80.0, 85.0, 9.0, 8.5)
    table = out.read_text()
    assert "| EvoNorm-S0 | 3 | 100.00 / 110.00 | 7.00 / 6.00 | 104.64 / 113.96 | 6.86 / 6.26 |" in table
    assert "| GN-ReLU(groups=16) | 3 | 80.00 / 85.00 | 9.00 / 8.50 | 99.09 | 8.14 |" in table
    assert table in capsys.readouterr().out + "\n"


def test_a_detection_run_beside_the_gan_runs_is_not_read_as_one(tmp_path):
    """detectron2 writes a metrics.json (a JSON line per iteration) in its runs: a folder searched for GAN runs
    skips every metrics.json outside a GAN run folder; a damaged run record is named."""
    write_run(tmp_path, "evonorm_s0", 0, 100.0, 7.0)
    detection = tmp_path / "detection" / "bn" / "seed0"
    detection.mkdir(parents=True)
    (detection / "metrics.json").write_text('{"iteration": 19, "total_loss": 2.0}\n{"iteration": 39}\n')
    (detection / RUN_FILE).write_text(json.dumps({"command": "tools/train_net.py", "format": 1}))
    assert report.find_metrics([tmp_path]) == [tmp_path / "evonorm_s0" / "seed0" / "metrics.json"]
    (tmp_path / "evonorm_s0" / "seed0" / RUN_FILE).write_text("[]")
    with pytest.raises(CorruptFileError, match="run record '.*seed0/run.json' is not a JSON object"):
        report.find_metrics([tmp_path])


def test_report_without_metrics_says_so(tmp_path):
    with pytest.raises(SystemExit, match="run gan/evaluate.py"):
        report.main([str(tmp_path)])


def test_paper_table5_and_layer_names_as_the_paper_prints_them():
    """Table 5 of Liu et al. 2020 (IS median/best, FID median/best; GN, LN, PixelNorm: one number), typed
    from the paper's text."""
    assert report.TABLE5.rows == {
        ("bn_relu",): (118.77, 124.01, 7.85, 7.29),
        ("evonorm_b0",): (101.13, 113.63, 6.91, 5.87),
        ("gn_relu",): (99.09, None, 8.14, None),
        ("ln_relu",): (91.56, None, 8.35, None),
        ("pixelnorm_relu",): (88.58, None, 10.41, None),
        ("evonorm_s0",): (104.64, 113.96, 6.86, 6.26),
    }
    assert report.TABLE5.columns == ("IS median", "IS best", "FID median", "FID best")
    assert report.LABELS == {"bn_relu": "BN-ReLU", "evonorm_b0": "EvoNorm-B0", "gn_relu": "GN-ReLU",
                             "ln_relu": "LayerNorm-ReLU", "pixelnorm_relu": "PixelNorm-ReLU",
                             "evonorm_s0": "EvoNorm-S0", "no_norm_relu": "ReLU (no norm)"}  # the control last


def test_aggregate_orders_seeds_numerically_takes_the_median_of_even_counts_and_sorts_layers(tmp_path):
    """Seeds 10 and 2 (found as seed10 before seed2) are listed 2, 10; with two seeds the median is their mean;
    best is the highest IS and the lowest FID; layers come in name order; options are named sorted."""
    for seed, (score, fid) in ((10, (50.0, 4.0)), (2, (40.0, 6.0))):
        write_run(tmp_path, "evonorm_s0", seed, score, fid)
    write_run(tmp_path, "bn_relu", 0, 60.0, 3.0, sync=True, groups=4)
    runs = [json.loads(path.read_text()) for path in report.find_metrics([tmp_path])]
    results = report.aggregate(runs[::-1])
    assert list(results) == ["bn_relu(groups=4,sync=True)", "evonorm_s0"]
    s0 = results["evonorm_s0"]
    assert (s0["seeds"], s0["is"], s0["fid"], s0["steps"]) == ([2, 10], [40.0, 50.0], [6.0, 4.0], [1000, 1000])
    assert (s0["is_median"], s0["is_best"], s0["fid_median"], s0["fid_best"]) == (45.0, 50.0, 5.0, 4.0)
    assert s0["measured_as"] == "imagenet 128px, 50000 samples, inception-v3-compat, eval mode, moving statistics"
    assert report.layer_name("bn_relu(groups=4,sync=True)") == "bn_relu"
    assert report.layer_key({"norm": "bn_relu", "norm_options": None}) == "bn_relu"  # recorded as null
    one_run = report.find_metrics([tmp_path / "bn_relu" / "seed0"])  # a run folder itself
    assert one_run == [tmp_path / "bn_relu" / "seed0" / "metrics.json"]


def test_table_shows_dash_for_layers_the_paper_lacks_and_plot_puts_fid_on_x(tmp_path, monkeypatch):
    write_run(tmp_path, "evonorm_b1", 0, 9.5, 3.25)
    runs = [json.loads(path.read_text()) for path in report.find_metrics([tmp_path])]
    assert "| evonorm_b1 | 1 | 9.50 / 9.50 | 3.25 / 3.25 | - | - |" in report.markdown(report.aggregate(runs))
    drawn = {}
    monkeypatch.setattr(report, "plot_series", lambda path, panels, **kw: drawn.update(panels=panels, **kw))
    write_run(tmp_path, "evonorm_b1", 1, 8.0, 2.0)
    report.plot([json.loads(path.read_text()) for path in report.find_metrics([tmp_path])], tmp_path / "p.png")
    (curve,) = next(iter(drawn["panels"].values()))
    assert (list(curve.x), list(curve.y), drawn["xlabel"], drawn["ylabel"]) == ([2.0, 3.25], [8.0, 9.5], "FID", "IS")
