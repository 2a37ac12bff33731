"""tools/benchmark_layers.py's own bookkeeping against values computed by hand.

Which baseline each layer is divided by, the medians and minima in milliseconds, the bytes kept for backward,
the compiled rows and their compile times, the input the layers and models run on (device, dtype, layout, train
or eval), the whole-model pairs, which limit each target row is held to (boundaries included) and the lines
printed for them.

The timer, the compiler and the memory probe are replaced by stand-ins whose costs are fixed per kind of
module: forward hooks say which module ran, so a cost follows what was run, not the name it is filed under;
the rest is the benchmark's own code. Mutation testing (``tools/mutation.py``) found these unchecked: the ratio
tests of ``test_behaviour_classes.py`` gave both baselines the same cost and ran no compiled row, so a layer
divided by the wrong baseline, a lost compile time or a minimum in the wrong unit passed.
"""
from __future__ import annotations

import json
import statistics

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from evonorm_core.layers import EvoNormB0, EvoNormS0

from .tool_scripts import load

bench = load("benchmark_layers")
GN_SILU, GN_RELU, BN_RELU = "gn_silu (native)", "gn_relu (native)", "bn_relu (native)"
# Each layer's baseline as the benchmark's docs state it: GN-SiLU for the S series and GroupNorm, else BN-ReLU.
BASELINE = {f"evonorm_{v} ({impl})": GN_SILU if v.startswith("s") else BN_RELU
            for v in ("s0", "s1", "s2", "b0", "b1", "b2") for impl in ("fused", "reference")}
BASELINE.update({GN_SILU: GN_SILU, GN_RELU: GN_SILU, BN_RELU: BN_RELU})
COMPILED = ("evonorm_s0 (fused)", "evonorm_b0 (fused)", GN_SILU, BN_RELU)
# (median, minimum) milliseconds of an eager fwd+bwd per kind of module; a compiled one costs half
LAYER_MS = {"EvoNormS0 fused": (2.8, 2.1), "EvoNormS0 reference": (5.0, 4.0), "EvoNormS1 fused": (3.0, 2.5),
            "EvoNormS1 reference": (5.5, 4.4), "EvoNormS2 fused": (2.6, 2.0), "EvoNormS2 reference": (4.6, 3.9),
            "EvoNormB0 fused": (1.6, 1.2), "EvoNormB0 reference": (3.2, 3.0), "EvoNormB1 fused": (1.8, 1.5),
            "EvoNormB1 reference": (3.6, 3.1), "EvoNormB2 fused": (1.7, 1.1), "EvoNormB2 reference": (3.4, 2.7),
            "GroupNorm SiLU": (2.0, 1.6), "GroupNorm ReLU": (1.9, 1.7), "BatchNorm2d ReLU": (4.0, 3.2)}
COPY_MS = (0.5, 0.4)
COMPILE_S = {"EvoNormS0 fused": 7.0, "EvoNormB0 fused": 9.0, "GroupNorm SiLU": 3.0, "BatchNorm2d ReLU": 4.0}


def kind(module: nn.Module) -> str:
    """What a layer is, read from the module: an EvoNorm class and its implementation, or norm and activation."""
    if isinstance(module, bench.NativeNormAct):
        return f"{type(module[0]).__name__} {type(module[1]).__name__}"
    return f"{type(module).__name__} {module.impl}"


def seconds(ms: tuple[float, float]) -> list[float]:
    """Three repetitions in seconds whose median and minimum are ``ms``."""
    median, minimum = ms
    return [median / 1e3, 2 * median / 1e3, minimum / 1e3]


class Compiled(nn.Module):
    """The stand-in of ``torch.compile``: runs the module it was given, and says so in ``calls``."""

    def __init__(self, module: nn.Module, calls: list[nn.Module]) -> None:
        super().__init__()
        self.module, self.calls = module, calls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(self.module)
        return self.module(x)


class Copies(TorchDispatchMode):
    """Counts the bytes ``copy_`` writes while active."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            self.bytes += args[0].numel() * args[0].element_size()
        return func(*args, **(kwargs or {}))


class LayerCosts:
    """The layer table's timer and compiler. Every step costs what the module it ran costs (a compiled one half),
    the step that copies the input :data:`COPY_MS`; every forward's module and input are kept in ``seen``."""

    def __init__(self) -> None:
        self.seen: list[tuple[nn.Module, torch.Tensor, bool]] = []  # (module, input, compiled)
        self.inference_mode: list[bool] = []  # per forward: whether it ran under torch.inference_mode
        self.compiled: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        self.timer_calls: list[tuple[int, int, torch.device]] = []
        self.rounds: list[list[str]] = []  # per timer call: the steps timed in those rounds
        self._ran: list[tuple[nn.Module, torch.Tensor]] = []
        self._compiled_calls: list[nn.Module] = []

    def watched(self, make):
        def build(channels: int) -> nn.Module:
            module = make(channels).double()
            module.register_forward_hook(self.record)
            return module
        return build

    def record(self, module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        self._ran.append((module, args[0]))
        self.inference_mode.append(torch.is_inference_mode_enabled())

    def compile_layer(self, module, step_input, grad):
        self.compiled.append((module, step_input, grad))
        return Compiled(module, self._compiled_calls), COMPILE_S[kind(module)]

    def times(self, steps, reps, warmup, device, before=None):
        self.timer_calls.append((reps, warmup, device))
        self.rounds.append(list(steps))
        out = {}
        for name, step in steps.items():
            assert before is not None, "every layer step starts from the same state (read_inputs)"
            before()  # untimed: no layer runs and nothing is copied in it
            self._ran.clear()
            self._compiled_calls.clear()
            with Copies() as copies:
                step()
            if not self._ran:
                assert copies.bytes > 0, f"step {name!r} ran no layer and copied nothing"
                out[name] = seconds(COPY_MS)
                continue
            (module, x), = self._ran
            compiled = bool(self._compiled_calls)
            self.seen.append((module, x, compiled))
            median, minimum = LAYER_MS[kind(module)]
            out[name] = seconds((median / 2, minimum / 2) if compiled else (median, minimum))
        return out


def test_timm_layers_are_divided_by_the_baseline_of_their_series():
    assert bench.baseline_of("timm EvoNorm2dS0") == GN_SILU and bench.baseline_of("timm EvoNorm2dB0") == BN_RELU


def run_table(monkeypatch, argv: list[str], shape: tuple[int, int, int, int], device: torch.device):
    costs = LayerCosts()
    monkeypatch.setattr(bench, "interleaved_times", costs.times)
    monkeypatch.setattr(bench, "compile_layer", costs.compile_layer)
    layers = {name: costs.watched(make) for name, make in bench.layer_factories(False).items()}
    args = bench.parse_args(["--threads", "1", "--reps", "3", "--warmup", "2", *argv])
    return bench.bench_shape(shape, layers, list(COMPILED), args, device, torch.float64), costs


def kinds_by_name() -> dict[str, str]:
    return {name: kind(make(8)) for name, make in bench.layer_factories(False).items()}


@pytest.mark.parametrize("argv", [[], ["--eval", "--channels-last"], ["--inference"]])
def test_each_layer_row_against_its_hand_computed_baseline_times_and_bytes(monkeypatch, argv):
    """Forward + backward (train or eval mode), or with --inference one forward under inference_mode in eval mode,
    which keeps nothing for backward and counts 3 passes over the input instead of 8."""
    shape = (2, 8, 28, 27)
    inference = "--inference" in argv
    results, costs = run_table(monkeypatch, argv, shape, torch.device("cpu"))
    input_bytes = 2 * 8 * 28 * 27 * 8  # float64
    assert costs.timer_calls == [(3, 2, torch.device("cpu"))] * 2
    rows = {r.layer: r for r in results}
    # the composed references in rounds of their own with their baselines, not between the compared layers
    composed = [name for name in rows if name.endswith("(reference)")]
    assert costs.rounds[1] == [GN_SILU, BN_RELU, *composed]
    assert costs.rounds[0] == [name for name in rows if name not in composed] + [bench.COPY]
    compiled = {name + bench.COMPILED for name in COMPILED}
    assert set(rows) == set(BASELINE) | compiled
    kinds = kinds_by_name()
    for name, r in rows.items():
        eager = name.removesuffix(bench.COMPILED)
        scale = 0.5 if name in compiled else 1.0
        median, minimum = (t * scale for t in LAYER_MS[kinds[eager]])
        base_median, base_minimum = (t * scale for t in LAYER_MS[kinds[BASELINE[eager]]])
        assert r.compiled == (name in compiled)
        assert r.baseline == BASELINE[eager] + (bench.COMPILED if r.compiled else "")
        assert r.shape == shape and r.input_bytes == input_bytes
        assert r.ms == pytest.approx(median) and r.min_ms == pytest.approx(minimum)
        assert r.ratio == pytest.approx(median / base_median) and r.min_ratio == pytest.approx(minimum / base_minimum)
        assert r.copy_ms == pytest.approx(COPY_MS[0])
        assert r.compile_s == (COMPILE_S[kinds[eager]] if r.compiled else 0.0)
        assert r.step == ("inference" if inference else "fwd+bwd") and r.passes == (3 if inference else 8)
        assert r.roofline == pytest.approx(r.passes * COPY_MS[0] / (2 * median))
        if r.compiled or inference:
            assert r.saved_bytes == 0  # not measured for compiled layers; nothing kept in inference
        elif name.endswith("(fused)"):
            assert input_bytes <= r.saved_bytes <= 1.1 * input_bytes  # the fused layers keep their input only
        elif name.endswith("(reference)"):
            assert r.saved_bytes >= 3 * input_bytes  # the composed formula keeps its intermediates
    # every layer, eager or compiled, ran on the benchmark's input (shape, dtype, layout) in the mode asked
    layout = torch.channels_last if "--channels-last" in argv else torch.contiguous_format
    assert sorted(kind(m) for m, _, c in costs.seen if c) == sorted(kinds[n] for n in COMPILED)
    assert len(costs.seen) == len(rows) + 2  # the two baselines timed again beside the references
    for module, x, _ in costs.seen:
        assert module.training == ("--eval" not in argv and not inference)
        assert x.shape == shape and x.dtype == torch.float64 and x.is_contiguous(memory_format=layout)
    timed = costs.inference_mode[:len(costs.seen)]  # the timed forwards (saved_bytes' come after them)
    assert timed == [inference] * len(costs.seen)
    for module, x, grad in costs.compiled:  # each compiled layer: a module of its own, compiled on that input
        assert not any(module is m for m, _, c in costs.seen if not c)
        assert x.shape == shape and x.is_contiguous(memory_format=layout)
        assert grad is None if inference else grad.shape == shape


def test_layers_and_their_input_are_on_the_device_given(monkeypatch):
    """On the meta device (no data; every layer has a meta implementation): modules, input and gradient there."""
    results, costs = run_table(monkeypatch, [], (2, 8, 6, 6), torch.device("meta"))
    assert len(results) == len(BASELINE) + len(COMPILED)
    for module, x, _ in costs.seen:
        assert x.device.type == "meta" and all(p.device.type == "meta" for p in module.parameters())
    for _, x, grad in costs.compiled:
        assert x.device.type == grad.device.type == "meta"


def layer_row(layer: str, ms: float, baseline_ms: float, shape=(2, 8, 28, 28), compiled=False, copy_ms=0.5):
    baseline = BASELINE[layer] + (bench.COMPILED if compiled else "")
    name = layer + (bench.COMPILED if compiled else "")
    return bench.LayerResult(name, shape, baseline, ms, ms, 0, 1, compiled=compiled, ratio=ms / baseline_ms,
                             min_ratio=1.0, copy_ms=copy_ms)


def test_target_rows_hold_each_kind_to_its_own_limit(monkeypatch):
    """Distinct limits per kind (the real ones are all 1.0): S and B eager, compiled, model time and memory."""
    monkeypatch.setattr(bench, "TARGETS", {"s_eager": 1.1, "b_eager": 1.2, "compiled": 1.3, "model_time": 1.4,
                                           "model_memory": 1.5})
    layers = [
        layer_row(GN_SILU, 2.0, 2.0),  # a baseline first: no row, and the ones after it still get theirs
        layer_row("evonorm_s0 (reference)", 5.0, 2.0),  # a reference EvoNorm: no row either
        layer_row("evonorm_s1 (fused)", 2.2, 2.0, shape=(2, 8, 27, 29)),  # 27 x 29 = 783 < 28 x 28: no roofline
        layer_row("evonorm_b2 (fused)", 2.4, 4.0, shape=(2, 8, 29, 27)),
        layer_row("evonorm_s0 (fused)", 2.6, 2.0, compiled=True),
        layer_row("evonorm_b0 (fused)", 1.0, 4.0, shape=(2, 8, 28, 28)),
    ]
    models = [bench.ModelResult("evonorm_s0 vs gn_relu (native)", False, 2, 32, [1.5], {"a": 3.0, "b": 2.0},
                                {"a": 150.0, "b": 100.0}, model="mobilenet_v2"),
              bench.ModelResult("evonorm_b0 vs bn_relu (native)", True, 2, 32, [1.0], {"a": 2.0, "b": 2.0},
                                {"a": 90.0, "b": 100.0})]
    rows = bench.target_rows(layers, models)
    assert [(r["target"], r["limit"]) for r in rows] == [
        ("evonorm_s1 fwd+bwd vs gn_silu (native) at 2x8x27x29", 1.1),
        ("evonorm_b2 fwd+bwd vs bn_relu (native) at 2x8x29x27", 1.2),
        ("evonorm_s0 compiled fwd+bwd vs gn_silu (native) compiled at 2x8x28x28", 1.3),
        ("evonorm_b0 fwd+bwd vs bn_relu (native) at 2x8x28x28", 1.2),
        ("evonorm_b0 fwd+bwd fraction of the copy rate at 2x8x28x28", bench.ROOFLINE_TARGET),
        ("MobileNetV2 step eager evonorm_s0 vs gn_relu (native)", 1.4),
        ("MobileNetV2 step eager peak memory evonorm_s0 vs gn_relu (native)", 1.5),
        ("ResNet-50 step compiled evonorm_b0 vs bn_relu (native)", 1.4),
        ("ResNet-50 step compiled peak memory evonorm_b0 vs bn_relu (native)", 1.5),
    ]
    # ratios by hand: 2.2 / 2.0, 2.4 / 4.0, 2.6 / 2.0, 1.0 / 4.0, 8 * 0.5 / (2 * 1.0), 3 / 2, 150 / 100, 1, 0.9
    assert [r["ratio"] for r in rows] == pytest.approx([1.1, 0.6, 1.3, 0.25, 2.0, 1.5, 1.5, 1.0, 0.9])
    assert [r["met"] for r in rows] == [True, True, True, True, True, False, True, True, True]
    assert [r.get("model") for r in rows] == [None] * 5 + ["mobilenet_v2"] * 2 + ["resnet50"] * 2


def test_inference_rows_are_held_to_their_ratio_only():
    """The copy-rate target is for fwd+bwd (8 passes): an inference row at a memory-bound shape (28 x 28) gets its
    ratio target, named for inference, and no roofline target; the same row as fwd+bwd gets both."""
    row = layer_row("evonorm_b0 (fused)", 1.0, 4.0, shape=(2, 8, 28, 28))
    row.step = "inference"
    assert [r["target"] for r in bench.target_rows([row], [])] == [
        "evonorm_b0 inference vs bn_relu (native) at 2x8x28x28"]
    row.step = "fwd+bwd"
    assert [r["target"] for r in bench.target_rows([row], [])] == [
        "evonorm_b0 fwd+bwd vs bn_relu (native) at 2x8x28x28", "evonorm_b0 fwd+bwd fraction of the copy rate at 2x8x28x28"]
    assert [r["target"] for r in bench.target_rows([row], [], roofline=False)] == [
        "evonorm_b0 fwd+bwd vs bn_relu (native) at 2x8x28x28"]


def test_a_ratio_equal_to_its_limit_meets_it(monkeypatch):
    """<= for the time and memory limits, >= for the roofline: equality meets both."""
    row = layer_row("evonorm_s0 (fused)", 2.2, 2.0)
    monkeypatch.setattr(bench, "TARGETS", {**bench.TARGETS, "s_eager": row.ratio})
    monkeypatch.setattr(bench, "ROOFLINE_TARGET", row.roofline)
    assert [r["met"] for r in bench.target_rows([row], [])] == [True, True]
    monkeypatch.setattr(bench, "TARGETS", {**bench.TARGETS, "s_eager": row.ratio * (1 - 1e-12)})
    monkeypatch.setattr(bench, "ROOFLINE_TARGET", row.roofline * (1 + 1e-12))
    assert [r["met"] for r in bench.target_rows([row], [])] == [False, False]


def test_format_targets_prints_the_count_and_one_line_per_row():
    rows = [{"target": "a", "ratio": 1.25, "limit": 1.0, "met": False},
            {"target": "b", "ratio": 0.5, "limit": 0.5, "met": True, "at_least": True}]
    assert bench.format_targets(rows) == ("targets: 1 of 2 met\n"
                                          "  MISS  1.25 <= 1.00  a\n"
                                          "  met   0.50 >= 0.50  b")


class ModelCosts:
    """The whole-model step's builder, timer and memory probe; each model's kind is read from its modules."""

    MS = {"evonorm_s0": (30.0, 20.0), "gn": (20.0, 16.0), "evonorm_b0": (40.0, 25.0), "bn": (25.0, 20.0)}
    MB = {"evonorm_s0": 130.0, "gn": 100.0, "evonorm_b0": 90.0, "bn": 120.0}
    COMPILE_S = {"evonorm_s0": 50.0, "gn": 30.0, "evonorm_b0": 60.0, "bn": 40.0}

    def __init__(self) -> None:
        self.ran: list[tuple[nn.Module, torch.Tensor]] = []
        self.calls: dict[str, tuple] = {}
        self.kind_of_name: dict[str, str] = {}

    @staticmethod
    def kind_of(model: nn.Module) -> str:
        for cls, name in ((EvoNormS0, "evonorm_s0"), (EvoNormB0, "evonorm_b0"), (nn.GroupNorm, "gn"),
                          (nn.BatchNorm2d, "bn")):
            if any(isinstance(m, cls) for m in model.modules()):
                return name
        raise AssertionError("no normalization")

    def training_steps(self, models, images, labels, dtype, compiled, lr):
        self.calls["training_steps"] = (images, labels, dtype, compiled, lr)
        for name, model in models.items():
            self.kind_of_name[name] = self.kind_of(model)
            model.register_forward_hook(lambda m, args, out: self.ran.append((m, args[0])))
        # a forward stands in for the training step (autocast, which the real one enters, has no meta device)
        steps = {name: (lambda model=model: model(images)) for name, model in models.items()}
        compile_s = {n: self.COMPILE_S[self.kind_of_name[n]] for n in models} if compiled else {}
        return steps, compile_s

    def times(self, steps, reps, warmup, device):
        self.calls["times"] = (reps, warmup, device)
        out = {}
        for name, step in steps.items():
            self.ran.clear()
            step()
            out[name] = seconds(self.MS[self.kind_of(self.ran[-1][0])])
        return out

    def peak(self, step, device):
        self.calls.setdefault("peak devices", []).append(device)
        self.ran.clear()
        step()
        return self.MB[self.kind_of(self.ran[-1][0])] * 2**20


@pytest.mark.parametrize("arch,compiled,channels_last", [("mobilenet_v2", False, False), ("resnet50", True, True)])
def test_model_pairs_times_memory_and_compile_times_by_hand(monkeypatch, arch, compiled, channels_last):
    """On the meta device (no data): each pair EvoNorm first, its values in ms and MB, the model and layout asked."""
    costs = ModelCosts()
    monkeypatch.setattr(bench, "training_steps", costs.training_steps)
    monkeypatch.setattr(bench, "interleaved_times", costs.times)
    monkeypatch.setattr(bench, "peak_step_bytes", costs.peak)
    args = bench.parse_args(["--model-batch", "2", "--model-size", "32", "--model-reps", "3", "--threads", "1",
                             *(["--channels-last"] if channels_last else [])])
    device = torch.device("meta")
    layout = torch.channels_last if channels_last else torch.contiguous_format
    results = bench.bench_model(args, device, compiled=compiled, arch=arch)
    pairs = {(costs.kind_of_name[a], costs.kind_of_name[b]): r for r in results for a, b in [list(r.ms)]}
    assert set(pairs) == {("evonorm_s0", "gn"), ("evonorm_b0", "bn")}
    for (evonorm, baseline), r in pairs.items():
        names = list(r.ms)
        assert r.pair == f"{names[0]} vs {names[1]}"
        assert (r.compiled, r.batch, r.size, r.model) == (compiled, 2, 32, arch)
        assert r.ms == {n: pytest.approx(costs.MS[costs.kind_of_name[n]][0]) for n in names}
        assert r.min_ms == {n: pytest.approx(costs.MS[costs.kind_of_name[n]][1]) for n in names}
        assert r.peak_mb == {n: pytest.approx(costs.MB[costs.kind_of_name[n]]) for n in names}
        assert r.compile_s == ({n: costs.COMPILE_S[costs.kind_of_name[n]] for n in names} if compiled else {})
        assert r.ratio == pytest.approx(costs.MS[evonorm][0] / costs.MS[baseline][0])
        assert r.memory_ratio == pytest.approx(costs.MB[evonorm] / costs.MB[baseline])
    images, labels, dtype, compiled_arg, _ = costs.calls["training_steps"]
    assert compiled_arg is compiled and dtype == args.dtype
    assert images.shape == (2, 3, 32, 32) and images.device == device and images.is_contiguous(memory_format=layout)
    assert labels.shape == (2,) and labels.device == device and labels.dtype == torch.int64
    reps, warmup, timer_device = costs.calls["times"]
    assert (reps, timer_device) == (3, device) and warmup >= 1  # an untimed first round (lazy initialization)
    assert costs.calls["peak devices"] == [device] * 4
    for model, x in costs.ran:  # every model on the device and in the layout asked, in training
        assert x.device == device and x.is_contiguous(memory_format=layout) and model.training
        conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups == 1 and m.kernel_size == (3, 3))
        assert conv.weight.device == device and conv.weight.is_contiguous(memory_format=layout)


def test_the_matrix_times_each_combination_once_and_holds_it_to_its_targets(monkeypatch, tmp_path, capsys):
    """--matrix: every layout x dtype x pass at every --matrix-batches batch, the shapes' channels and planes at that
    batch, native and fused layers only, nothing compiled; each cell's targets are its own (roofline rows only for
    fwd+bwd at the largest batch), and a slow layer in one cell is a miss of that cell alone."""
    calls = []

    def table(shape, layers, compiled_names, args, device, dtype):
        calls.append((shape, args.channels_last, dtype, args.inference, args.eval, tuple(compiled_names),
                      tuple(sorted(layers)), device))
        slow = args.channels_last and dtype is torch.bfloat16 and args.inference and shape == (2, 8, 7, 7)
        return [bench.LayerResult(name, shape, bench.baseline_of(name), 1.0, 1.0, 0, 4, ratio=1.0, min_ratio=1.0,
                                  copy_ms=0.5, step="inference" if args.inference else "fwd+bwd")
                for name in layers if "(native)" in name] + [
                bench.LayerResult(name, shape, bench.baseline_of(name), 0.8, 0.7, 0, 4,
                                  ratio=1.25 if slow and name == "evonorm_b1 (fused)" else 0.8, min_ratio=0.7,
                                  copy_ms=0.5, step="inference" if args.inference else "fwd+bwd")
                for name in layers if "(fused)" in name]

    monkeypatch.setattr(bench, "bench_shape", table)
    out = tmp_path / "matrix.json"
    # --eval is ignored: the fwd+bwd cells train, the inference cells run in eval mode by themselves
    assert bench.main(["--matrix", "--eval", "--shapes", "4x8x28x28", "4x8x7x7", "--allocator", "system", "--json", str(out),
                       "--plot", ""]) == 0
    fused = tuple(sorted(f"{n} (fused)" for n in bench.EVONORMS))
    assert all(c[4:] == (False, (), tuple(sorted([BN_RELU, GN_RELU, GN_SILU, *fused])), torch.device("cpu"))
               for c in calls)
    combos = {(shape, cl, dtype, inference) for shape, cl, dtype, inference, *_ in calls}
    assert len(calls) == len(combos) == 2 * 2 * 2 * 2 * 2  # layouts, dtypes, passes, batches, shapes
    assert {shape for shape, *_ in calls} == {(16, 8, 28, 28), (16, 8, 7, 7), (2, 8, 28, 28), (2, 8, 7, 7)}
    cells = json.loads(out.read_text())["cells"]
    assert [(c["layout"], c["dtype"], c["step"], c["batch"]) for c in cells] == [
        (layout, dtype, step, batch) for layout in ("NCHW", "channels_last") for dtype in ("float32", "bfloat16")
        for step in ("fwd+bwd", "inference") for batch in (16, 2)]
    for c in cells:
        assert all(r["saved_ratio"] == 0.0 and r["roofline"] == pytest.approx(r["copy_ms"] * (3 if c["step"] == "inference"
                   else 8) / (2 * r["ms"])) for r in c["layers"])
        roofline = [t for t in c["targets"] if "copy rate" in t["target"]]
        assert len(roofline) == (6 if (c["step"], c["batch"]) == ("fwd+bwd", 16) else 0)  # 28 x 28 only
        assert len(c["targets"]) - len(roofline) == 12 and all(f" {c['step']} vs " in t["target"]
                                                               for t in c["targets"] if t not in roofline)
    missed = [(c["layout"], c["dtype"], c["step"], c["batch"], t["target"]) for c in cells for t in c["targets"]
              if not t["met"]]
    assert missed == [("channels_last", "bfloat16", "inference", 2,
                       "evonorm_b1 inference vs bn_relu (native) at 2x8x7x7")]
    printed = capsys.readouterr().out
    assert ("channels_last bfloat16 inference batch 2: 11 of 12 targets met; worst S 0.80x (evonorm_s0 at 2x8x28x28); "
            "worst B 1.25x (evonorm_b1 at 2x8x7x7); MISS: evonorm_b1 inference vs bn_relu (native) at 2x8x7x7 1.25"
            in printed)
    assert ("NCHW float32 fwd+bwd batch 2: 12 of 12 targets met; worst S 0.80x (evonorm_s0 at 2x8x28x28); worst B 0.80x "
            "(evonorm_b0 at 2x8x28x28)\n") in printed  # no MISS part where nothing missed
    assert "matrix: 215 of 216 targets met in 16 combinations" in printed


def test_the_matrix_times_only_the_evonorms_asked_for(monkeypatch, tmp_path, capsys):
    """--layers narrows the matrix's EvoNorms (the default compiled layers are not added: nothing is compiled); a
    series with no layer is left out of the line instead of failing."""
    timed = set()

    def table(shape, layers, compiled_names, args, device, dtype):
        timed.update(layers)
        return [bench.LayerResult(name, shape, bench.baseline_of(name), 1.0, 1.0, 0, 4, ratio=1.0, min_ratio=1.0,
                                  copy_ms=0.5) for name in layers]

    monkeypatch.setattr(bench, "bench_shape", table)
    argv = ["--matrix", "--layers", "b1", "--shapes", "4x8x7x7", "--matrix-batches", "2", "--allocator", "system",
            "--json", "", "--plot", ""]
    assert bench.main(argv) == 0
    assert timed == {BN_RELU, GN_RELU, GN_SILU, "evonorm_b1 (fused)"}
    assert "NCHW float32 fwd+bwd batch 2: 1 of 1 targets met; worst B 1.00x (evonorm_b1 at 2x8x7x7)\n" in capsys.readouterr().out


def test_worst_ratio_picks_the_slowest_of_a_series_at_a_shape():
    rows = [{"layer": "evonorm_s0 (fused)", "shape": [2, 8, 7, 7], "ratio": 0.5},
            {"layer": "evonorm_s1 (fused)", "shape": [2, 8, 7, 7], "ratio": 0.9},
            {"layer": "evonorm_s2 (fused)", "shape": [2, 16, 7, 7], "ratio": 1.5},
            {"layer": "evonorm_b0 (fused)", "shape": [2, 8, 7, 7], "ratio": 2.0}]
    cell = {"layers": rows}
    assert bench.worst_ratio(cell, "s", (8, 7, 7)) is rows[1]
    assert bench.worst_ratio(cell, "s", (16, 7, 7)) is rows[2] and bench.worst_ratio(cell, "s") is rows[2]
    assert bench.worst_ratio(cell, "b", (16, 7, 7)) is None


def test_format_cell_lists_each_miss_with_its_ratio():
    cell = {"layout": "NCHW", "dtype": "float32", "step": "fwd+bwd", "batch": 2, "layers": [],
            "targets": [{"target": "a", "ratio": 1.5, "met": False}, {"target": "b", "ratio": 0.5, "met": True},
                        {"target": "c", "ratio": 1.25, "met": False}]}
    assert bench.format_cell(cell) == "NCHW float32 fwd+bwd batch 2: 1 of 3 targets met; MISS: a 1.50, c 1.25"


def test_a_model_steps_time_ratio_is_the_median_of_each_rounds_ratio():
    """One slow round (a stall of the machine) lands on one step's times; the median of that step's
    times moves (3.0 / 1.2 = 2.5x here), the median of the per-round ratios does not."""
    evonorm, baseline = [1.0, 3.0, 3.1], [1.1, 1.2, 3.3]
    result = bench.ModelResult("evonorm_s0 vs gn_relu (native)", False, 2, 32,
                               [e / b for e, b in zip(evonorm, baseline)],
                               {"a": statistics.median(evonorm), "b": statistics.median(baseline)}, {"a": 1.0, "b": 1.0},
                               min_ms={"a": min(evonorm), "b": min(baseline)})
    assert result.ratio == pytest.approx(3.1 / 3.3)
    assert "time 0.94x (0.91-2.50x over 3 rounds; min 0.91x)" in bench.format_model_lines([result])


@pytest.mark.parametrize("compiled,with_models,titles", [
    (False, False, ["fwd+bwd time / baseline (eager)", "bytes kept for backward / input"]),
    (True, False, ["fwd+bwd time / baseline (eager)", "fwd+bwd time / baseline (compiled)",
                   "bytes kept for backward / input"]),
    (False, True, ["fwd+bwd time / baseline (eager)", "bytes kept for backward / input",
                   "train step / GN-ReLU or BN-ReLU"]),
])
def test_the_figure_has_a_panel_for_each_kind_of_measurement_taken(compiled, with_models, titles):
    """No empty panel for compiled layers or model steps that were not run (--compiled-layers with no names,
    --no-model); the layer panels' legends sit beside the bars."""
    pytest.importorskip("matplotlib")
    layers = [layer_row(GN_SILU, 2.0, 2.0), layer_row("evonorm_s0 (fused)", 1.5, 2.0)]
    if compiled:
        layers += [layer_row(GN_SILU, 3.0, 3.0, compiled=True), layer_row("evonorm_s0 (fused)", 2.0, 3.0, compiled=True)]
    models = [bench.ModelResult("evonorm_s0 vs gn_relu (native)", False, 2, 32, [1.1], {"a": 1.1, "b": 1.0},
                                {"a": 90.0, "b": 100.0})] if with_models else []
    fig = bench.draw(layers, models)
    try:
        assert [ax.get_ylabel() for ax in fig.axes] == titles
        legend = fig.axes[0].get_legend()
        assert legend.get_bbox_to_anchor().x0 >= fig.axes[0].get_window_extent().x1 - 1
    finally:
        bench.pyplot().close(fig)


def test_interleaved_rounds_alternate_and_start_each_step_after_before():
    """Rounds alternate their order (A B, B A, ...) and ``before`` runs, untimed, before every step; the warm-up
    rounds' times are dropped."""
    log = []
    steps = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    times = bench.interleaved_times(steps, 2, 1, torch.device("cpu"), before=lambda: log.append("before"))
    assert log == ["before", "a", "before", "b", "before", "b", "before", "a", "before", "a", "before", "b"]
    assert {name: len(t) for name, t in times.items()} == {"a": 2, "b": 2}


def test_read_inputs_reads_the_input_and_the_gradient_whole():
    """One full reduction of each (the gradient only when there is one), nothing written."""
    x, grad = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)

    class Reads(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.read = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.read.append((func, args[0].data_ptr(), args[0].numel()))
            return func(*args, **(kwargs or {}))

    with Reads() as reads:
        bench.read_inputs(x, grad)
        bench.read_inputs(x, None)
    whole = [(torch.ops.aten.sum.default, t.data_ptr(), t.numel()) for t in (x, grad, x)]
    assert reads.read == whole
