"""tools/benchmark_layers.py: measures real layers (eager and compiled), counts saved bytes and peak
memory, checks the targets, writes JSON and PNG, rejects bad flags."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evonorm_core import EvoNormS0

from .tool_scripts import load

bench = load("benchmark_layers")


def test_saved_bytes_counts_each_stored_tensor_once():
    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    assert bench.saved_bytes(lambda: torch.relu(x)) == x.numel() * 4  # relu keeps its output
    assert bench.saved_bytes(lambda: x * x) == x.numel() * 4  # the same tensor twice
    assert bench.saved_bytes(lambda: torch.relu(x.detach())) == 0


def test_peak_step_bytes_sees_a_large_temporary():
    size = 64 * 2**20

    def step():
        t = torch.ones(size // 4)  # 64 MiB, touched
        t.add_(1)

    peak = bench.peak_step_bytes(step, torch.device("cpu"))
    if math.isnan(peak):
        pytest.skip("peak resident memory cannot be measured on this system")
    assert 0.9 * size <= peak <= 1.5 * size


def test_a_training_steps_peak_is_the_same_on_every_profiled_call():
    """The step releases its gradients at its end, so it frees nothing allocated before it: a step's
    first profiled call used to miss the free of the previous step's gradients and count them twice."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.Flatten(), torch.nn.Linear(64 * 14 * 14, 512))
    steps, _ = bench.training_steps({"m": model}, torch.randn(2, 3, 16, 16), torch.tensor([0, 1]), "float32",
                                    compiled=False, lr=1e-3)
    steps["m"]()
    assert all(p.grad is None for p in model.parameters())
    peaks = [bench.peak_step_bytes(steps["m"], torch.device("cpu")) for _ in range(3)]
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert peaks[0] == peaks[1] == peaks[2] and weights <= peaks[0] <= 3 * weights


def test_the_layer_table_takes_channels_that_32_does_not_divide(capsys):
    """MobileNetV2's widths (144 channels): GroupNorm and timm's S0 take the S layers' groups (24), not 32."""
    argv = ["--shapes", "2x144x4x4", "--reps", "1", "--warmup", "0", "--threads", "1", "--no-model",
            "--no-targets", "--allocator", "system", "--json", "", "--plot", ""]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "2x144x4x4      gn_silu (native)" in printed and "2x144x4x4      evonorm_s0 (fused)" in printed


def test_compiled_layers_run_at_more_shapes_than_dynamos_default_limit_allows(capsys):
    """Six shapes with S0 and B0 compiled (their baselines too): 12 compiled versions of the layers' shared
    forward, past Dynamo's default limit of 8, which under fullgraph=True stopped the run."""
    shapes = [f"2x{channels}x4x4" for channels in (8, 16, 24, 32, 40, 48)]  # new parameters at each: no dynamic shapes
    argv = ["--shapes", *shapes, "--reps", "1", "--warmup", "0", "--threads", "1", "--no-model", "--no-timm",
            "--no-targets", "--layers", "s0 (fused)", "b0 (fused)", "--compiled-layers", "evonorm_s0", "evonorm_b0",
            "--allocator", "system", "--json", "", "--plot", ""]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("2x48x4x4 ") and "evonorm_b0 (fused) compiled" in line for line in lines)


def test_layer_table_targets_and_json(tmp_path, capsys):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["--shapes", "2x32x12x12", "--reps", "2", "--warmup", "0", "--threads", "1", "--no-model", "--no-timm",
            "--compiled-layers", "evonorm_s0", "--allocator", "system", "--json", str(out), "--plot", str(png)]
    assert bench.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "evonorm_s0 (fused)" in printed and "gn_silu (native) compiled" in printed and "targets:" in printed
    assert "other processes busy on" in printed.splitlines()[0]
    payload = json.loads(out.read_text())
    assert payload["busy_elsewhere"] is None or payload["busy_elsewhere"] >= 0
    rows = {r["layer"]: r for r in payload["layers"]}
    expected = {"bn_relu (native)", "gn_relu (native)", "gn_silu (native)", "gn_silu (native) compiled",
                "evonorm_s0 (fused) compiled"} | {
        f"evonorm_{s} ({impl})" for s in ("s0", "s1", "s2", "b0", "b1", "b2") for impl in ("fused", "reference")
    }
    assert expected == set(rows)
    assert rows["gn_silu (native)"]["ratio"] == 1.0 and rows["bn_relu (native)"]["ratio"] == 1.0
    compiled = rows["evonorm_s0 (fused) compiled"]
    assert compiled["baseline"] == "gn_silu (native) compiled" and compiled["compiled"] and compiled["compile_s"] > 0
    for s in ("s0", "s1", "s2", "b0", "b1", "b2"):
        fused, reference = rows[f"evonorm_{s} (fused)"], rows[f"evonorm_{s} (reference)"]
        assert fused["saved_ratio"] <= 1.1 < 3 <= reference["saved_ratio"]
        assert fused["ms"] > 0 and math.isfinite(fused["ratio"])
    targets = {t["target"]: t for t in payload["targets"]}
    eager_s0 = targets["evonorm_s0 fwd+bwd vs gn_silu (native) at 2x32x12x12"]
    assert eager_s0["limit"] == 1.0 and eager_s0["met"] == (eager_s0["ratio"] <= 1.0)
    assert targets["evonorm_b1 fwd+bwd vs bn_relu (native) at 2x32x12x12"]["limit"] == 1.0
    assert targets["evonorm_s0 compiled fwd+bwd vs gn_silu (native) compiled at 2x32x12x12"]["limit"] == 1.0
    assert not any("copy rate" in t for t in targets)  # 12 x 12 planes are not memory-bound: no roofline target
    copy_ms = {r["copy_ms"] for r in payload["layers"]}
    assert len(copy_ms) == 1 and copy_ms.pop() > 0  # one copy_ per shape, in the same rounds
    s0 = rows["evonorm_s0 (fused)"]
    assert math.isclose(s0["roofline"], 8 * s0["copy_ms"] / (2 * s0["ms"]))
    assert "copy_ (x -> buffer)" in printed and "GB/s read + write" in printed


def test_matrix_times_real_layers_in_every_combination(tmp_path):
    """--matrix on a small shape: 16 combinations of the real layers (natives and the fused EvoNorms asked for),
    their input in the combination's dtype (bytes per element) at its batch, a PNG heat map."""
    out, png = tmp_path / "matrix.json", tmp_path / "matrix.png"
    argv = ["--matrix", "--shapes", "1x8x6x6", "--matrix-batches", "3", "1", "--layers", "s0", "b0", "--reps", "1",
            "--warmup", "0", "--threads", "1", "--allocator", "system", "--json", str(out), "--plot", str(png)]
    assert bench.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == 16
    for c in cells:
        rows = {r["layer"]: r for r in c["layers"]}
        assert set(rows) == {"bn_relu (native)", "gn_relu (native)", "gn_silu (native)", "evonorm_s0 (fused)",
                             "evonorm_b0 (fused)"}
        size = {"float32": 4, "bfloat16": 2}[c["dtype"]]
        assert all(r["shape"] == [c["batch"], 8, 6, 6] and r["input_bytes"] == c["batch"] * 8 * 36 * size
                   and r["step"] == c["step"] and r["ms"] > 0 for r in rows.values())
        assert (rows["evonorm_s0 (fused)"]["saved_bytes"] > 0) == (c["step"] == "fwd+bwd")


def test_host_profile_names_the_layers_own_calls(tmp_path, capsys):
    """--profile-host times each layer's eager fwd+bwd and lists, per step, the functions that take the host
    time: the fused S0's list holds its operator call (its C++ autograd node's: the backward runs inside the
    engine's run_backward, with no Python), the native baseline's its ATen call."""
    out = tmp_path / "profile.json"
    argv = ["--profile-host", "--shapes", "2x16x6x6", "--layers", "s0 (fused)", "--reps", "3", "--warmup", "1",
            "--threads", "1", "--no-timm", "--compiled-layers", "--profile-top", "40", "--allocator", "system",
            "--json", str(out)]
    assert bench.main(argv) == 0
    payload = json.loads(out.read_text())
    assert payload["busy_elsewhere"] is None or payload["busy_elsewhere"] >= 0
    layers = payload["host_profile"]["2x16x6x6"]
    assert set(layers) == {"bn_relu (native)", "gn_relu (native)", "gn_silu (native)", "evonorm_s0 (fused)"}
    s0 = layers["evonorm_s0 (fused)"]
    assert s0["median_us"] > 0 and len(s0["top"]) == 40
    names = " ".join(row["function"] for row in s0["top"])
    assert "torch._ops.evonorm" in names and "run_backward" in names
    assert "group_norm" in " ".join(row["function"] for row in layers["gn_silu (native)"]["top"])
    own = [row["own_us"] for row in s0["top"]]
    assert own == sorted(own, reverse=True) and all(row["calls_per_step"] > 0 for row in s0["top"])
    printed = capsys.readouterr().out
    assert "us per eager fwd+bwd" in printed and "other processes busy on" in printed.splitlines()[0]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--shapes", "16x64x56"], "is not NxCxHxW"),
        (["--reps", "0"], "--reps must be at least 1"),
        (["--dtype", "int8"], "invalid choice"),
        (["--device", "tpu9"], "is not a torch device"),
        (["--compiled-layers", "evonorm_x9"], "'evonorm_x9' is not one of"),
        (["--profile-host", "--profile-top", "0"], "--profile-top must be at least 1, got 0"),
        (["--matrix", "--matrix-batches", "16", "0"], "--matrix-batches must be at least 1, got 0"),
    ],
)
def test_bad_flags_name_the_value(capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,plot",
    [
        ([], "docs/results/benchmark_layers.png"),
        (["--matrix"], "docs/results/benchmark_matrix.png"),
        (["--json", "runs/a.json"], "runs/a.png"),  # a run written elsewhere leaves the committed figure alone
        (["--matrix", "--json", "runs/m.json"], "runs/m.png"),
        (["--json", "runs/a.json", "--plot", ""], ""),
    ],
)
def test_the_plot_goes_beside_a_named_json(argv, plot):
    assert bench.parse_args(argv).plot == plot


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(bench.MODELS))
def test_whole_model_step_pairs(arch):
    args = bench.parse_args(["--model-batch", "2", "--model-size", "32", "--model-reps", "1", "--threads", "1"])
    results = bench.bench_model(args, torch.device("cpu"), compiled=False, arch=arch)
    assert [r.pair for r in results] == ["evonorm_s0 vs gn_relu (native)", "evonorm_b0 vs bn_relu (native)"]
    assert all(r.model == arch for r in results)
    assert all(math.isfinite(r.ratio) and r.ratio > 0 for r in results)
    assert all(all(mb > 0 for mb in r.peak_mb.values()) for r in results)
    lines = bench.format_model_lines(results)
    assert f"{bench.MODELS[arch]} train step" in lines
    assert "eager): evonorm_s0 vs gn_relu (native): time" in lines and "peak memory" in lines
    rows = bench.target_rows([], results)
    assert len(rows) == 4 and all(row["model"] == arch for row in rows)


def test_whole_models_normalize_every_position_with_their_layer():
    """MobileNetV2's GroupNorm baseline takes the S0 layers' groups where 32 does not divide C (16, 24, 144)."""
    models = bench.whole_models("mobilenet_v2", torch.device("cpu"), torch.contiguous_format)
    groups = {m.num_channels: m.num_groups for m in models[bench.GN_RELU].modules() if isinstance(m, torch.nn.GroupNorm)}
    assert groups == {m.num_channels: m.groups for m in models["evonorm_s0"].modules() if isinstance(m, EvoNormS0)}
    assert groups[16] == 16 and groups[24] == 24 and groups[144] == 24 and groups[32] == 32 and groups[1280] == 32
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in models["evonorm_s0"].modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in models["evonorm_b0"].modules())


# in a process of its own: the setting changes malloc for the rest of the process (the tests above pass
# --allocator system for that reason)
KEEPS_FREED_MEMORY = """
import torch
from tests.tool_scripts import load
assert load("benchmark_layers").keep_freed_memory()
def in_heap(address):
    for line in open("/proc/self/maps"):
        span, *rest = line.split()
        low, high = (int(a, 16) for a in span.split("-"))
        if low <= address < high:
            return rest[-1] == "[heap]"
    return False
big = torch.empty(64 << 20, dtype=torch.uint8)  # 64 MiB: mmap'd by glibc's default, whatever its threshold
print(in_heap(big.data_ptr()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt and /proc/self/maps are glibc on Linux")
def test_the_heap_allocator_serves_large_buffers_from_the_heap():
    """--allocator heap (the default): a 64 MiB tensor comes from glibc's heap, not a fresh mmap."""
    done = subprocess.run([sys.executable, "-c", KEEPS_FREED_MEMORY], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "True"
