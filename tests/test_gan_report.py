"""Table 5 aggregation: median/best over seeds per layer, next to the paper's numbers."""
import json

import pytest

from gan import report


def write_run(root, norm, seed, is_mean, fid, **options):
    run = root / f"{norm}" / f"seed{seed}"
    run.mkdir(parents=True)
    metrics = dict(is_mean=is_mean, is_std=1.0, fid=fid, norm=norm, norm_options=options, step=1000, num_samples=50000,
                   feature_extractor="inception-v3-compat", sampling="eval mode, moving statistics", seed=seed,
                   dataset="imagenet", resolution=128)
    (run / "metrics.json").write_text(json.dumps(metrics))


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


def test_report_without_metrics_says_so(tmp_path):
    with pytest.raises(SystemExit, match="run gan/evaluate.py"):
        report.main([str(tmp_path)])
