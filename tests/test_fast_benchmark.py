"""tools/benchmark_layers.py: measures real layers, counts saved bytes, writes JSON, rejects bad flags."""
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

TOOL = Path(__file__).resolve().parents[1] / "tools" / "benchmark_layers.py"


@pytest.fixture(scope="module")
def bench():
    # Loaded by path: an installed detectron2 wheel can shadow the name `tools`.
    spec = importlib.util.spec_from_file_location("benchmark_layers", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_saved_bytes_counts_each_stored_tensor_once(bench):
    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    assert bench.saved_bytes(lambda: torch.relu(x)) == x.numel() * 4  # relu keeps its output
    assert bench.saved_bytes(lambda: x * x) == x.numel() * 4  # the same tensor twice
    assert bench.saved_bytes(lambda: torch.relu(x.detach())) == 0


def test_layer_table_and_json(bench, tmp_path, capsys):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["--shapes", "2x32x12x12", "--reps", "2", "--warmup", "0", "--threads", "1", "--no-model", "--no-timm"]
    bench.main([*argv, "--json", str(out), "--plot", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "evonorm_s0 (fused)" in printed and "gn_silu (native)" in printed
    rows = {r["layer"]: r for r in json.loads(out.read_text())["layers"]}
    expected = {"bn_relu (native)", "gn_relu (native)", "gn_silu (native)"} | {
        f"evonorm_{s} ({impl})" for s in ("s0", "s1", "s2", "b0", "b1", "b2") for impl in ("fused", "reference")
    }
    assert expected <= set(rows)
    assert rows["gn_silu (native)"]["ratio"] == 1.0 and rows["bn_relu (native)"]["ratio"] == 1.0
    for s in ("s0", "s1", "s2", "b0", "b1", "b2"):
        fused, reference = rows[f"evonorm_{s} (fused)"], rows[f"evonorm_{s} (reference)"]
        assert fused["saved_ratio"] <= 1.1 < 3 <= reference["saved_ratio"]
        assert fused["ms"] > 0 and math.isfinite(fused["ratio"])


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--shapes", "16x64x56"], "is not NxCxHxW"),
        (["--reps", "0"], "--reps must be at least 1"),
        (["--dtype", "int8"], "invalid choice"),
        (["--device", "tpu9"], "is not a torch device"),
    ],
)
def test_bad_flags_name_the_value(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_whole_model_step_pairs(bench):
    args = bench.parse_args(["--model-batch", "2", "--model-size", "32", "--model-reps", "1", "--threads", "1"])
    results = bench.bench_model(args, torch.device("cpu"))
    assert [r.pair for r in results] == ["evonorm_s0 vs gn_relu (native)", "evonorm_b0 vs bn_relu (native)"]
    assert all(math.isfinite(r.ratio) and r.ratio > 0 for r in results)
