"""tools/benchmark_timm.py: timm's EvoNorm model against the swapped one, same function checked, a step timed
and its peak memory measured for both, ratios and JSON written; bad flags name the value."""
import json
import math

import pytest

from .tool_scripts import load

pytest.importorskip("timm", reason="timm is not installed (pip install -e .[timm]); the timm benchmark is untested")
bench = load("benchmark_timm")


@pytest.mark.slow
def test_a_tiny_eager_run_measures_both_models_and_writes_json(tmp_path, capsys):
    out = tmp_path / "timm.json"
    argv = ["--batch", "2", "--size", "32", "--reps", "1", "--warmup", "0", "--threads", "1", "--classes", "10",
            "--no-compiled", "--json", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "resnetv2_50d_evos: converted 51 EvoNorm layers to their equivalents" in printed
    assert "resnetv2_50d_evos train step (batch 2, 32x32, eager): swapped / timm time" in printed
    assert "other processes busy on" in printed.splitlines()[0]
    payload = json.loads(out.read_text())
    assert payload["busy_elsewhere"] is None or payload["busy_elsewhere"] >= 0
    assert payload["command"].startswith("python tools/benchmark_timm.py --batch 2")
    assert payload["same_function"]["max_logit_diff_eval"] < 1e-4
    (step,) = payload["steps"]
    assert not step["compiled"] and set(step["ms"]) == set(step["peak_mb"]) == {bench.TIMM, bench.SWAPPED}
    assert all(v > 0 for v in [*step["ms"].values(), *step["peak_mb"].values()])
    assert math.isclose(step["ratio"], step["ms"][bench.SWAPPED] / step["ms"][bench.TIMM])
    assert math.isclose(step["memory_ratio"], step["peak_mb"][bench.SWAPPED] / step["peak_mb"][bench.TIMM])


@pytest.mark.parametrize("argv,message", [
    (["--reps", "0"], "--reps must be at least 1"),
    (["--batch", "0"], "--batch must be at least 1"),
    (["--no-eager", "--no-compiled"], "leave nothing to measure"),
    (["--device", "tpu9"], "is not a torch device"),
    (["--dtype", "int8"], "invalid choice"),
    (["--model", "resnet18"], "--model 'resnet18' is not a timm model built with EvoNorms; accepted: "),
])
def test_bad_flags_name_the_value(capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


def test_defaults_depend_on_the_device():
    args = bench.parse_args([])
    assert (args.model, args.batch, args.size, args.json) == ("resnetv2_50d_evos", 4, 128, "docs/results/benchmark_timm.json")
