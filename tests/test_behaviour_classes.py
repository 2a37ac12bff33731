"""Classes of bugs that a hand-planted set slipped past, each closed by a test of the behaviour
against a reference outside the code (not against the line a plant touched), so that any edit that
breaks the behaviour fails it, wherever it is made:

1. dtype/device of a converted layer: every tensor of each new layer has the dtype and device of
   the BatchNorm it replaces, whichever part of that BatchNorm's state holds them (weights,
   moving averages or both), for registered names and callables, with or without affine;
2. the benchmark's own ratios: with step times and peak memory fixed per kind of model (found by
   what the model contains, not by its label), the ResNet-50 pairs and the layer table report
   EvoNorm over its baseline, the medians' and minima's ratios apart, and a slower EvoNorm misses
   its target;
3. liveness (batch dependence of a searched layer) and 4. the printer/parser round trip: the
   property tests ``test_properties_genome.py`` and ``test_properties_expression.py``;
5. the Fig. 10 comparison's reuse boundary: a search of N candidates, run by the real driver, is
   complete for every budget up to N and for none above; an interrupted one is never complete for a
   budget whose candidates it has not all recorded;
6. data order across epochs in distributed sampling: with two processes each epoch's batches are
   disjoint shards, the order changes from epoch to epoch and with the seed, and a resumed run
   sees the epochs an uninterrupted one sees;
7. train/eval mode owned by the callee: ``Trainer.step`` trains in training mode whatever mode its
   caller left the model in (loss, gradient and moving averages of a training-mode copy), and in
   a classification run every forward pass with gradients runs in training mode, every evaluation
   in eval mode.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import evonorm_core
from evonorm_core.classifiers.optimizer import OptimizerSettings
from evonorm_core.classifiers.schedule import ScheduleSettings
from evonorm_core.classifiers.trainer import Trainer
from evonorm_core.experiment.distributed import DistributedContext
from evonorm_core.layers import EvoNormB0, EvoNormS0
from evonorm_core.search import CandidateResult, EvolutionConfig, LayerSearch, StopCondition, parse, read_checkpoint
from evonorm_suite.classification import train as train_module
from evonorm_suite.classification.train import TrainConfig
from evonorm_suite.search.compare import is_complete, run_cell, run_folder

from .tool_scripts import load

bench = load("benchmark_layers")


# ---- 1. a converted layer's dtype and device ----------------------------------------------------

def convnet(affine: bool, track: bool) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8, affine=affine, track_running_stats=track), nn.ReLU(),
                         nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8, affine=affine, track_running_stats=track))


def make_s0(channels: int, nonlinearity: bool = True) -> nn.Module:
    return evonorm_core.build_norm_act("evonorm_s0", channels, nonlinearity, groups=4)


@pytest.mark.parametrize("layer_affine", [True, False])
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("state", [(True, True), (True, False), (False, True)], ids=["affine+stats", "affine", "stats"])
@pytest.mark.parametrize("spec", ["evonorm_b0", "evonorm_s0", "bn_relu", "gn_relu", "frn", "callable"])
def test_converted_layers_take_the_dtype_and_device_of_the_batchnorm_they_replace(spec, state, dtype, device,
                                                                                  layer_affine):
    """A BatchNorm holds its dtype and device in its weights, its moving averages, or both (affine and
    track_running_stats each on or off): every floating tensor of every new layer has the dtype and
    device of the model it was converted from, the new layer with or without its own affine."""
    model = convnet(*state).to(device=device, dtype=dtype)
    if spec == "callable":
        converted = evonorm_core.convert_norm_act(model, make_s0)
    else:
        options = {"groups": 4} if spec in ("evonorm_s0", "gn_relu") else {}
        converted = evonorm_core.convert_norm_act(model, spec, affine=layer_affine, **options)
    new_layers = [m for m in converted.modules() if isinstance(m, evonorm_core.layers.NormAct2d)]
    assert len(new_layers) == 2
    tensors = [t for layer in new_layers for t in [*layer.parameters(), *layer.buffers()] if t.is_floating_point()]
    if spec == "gn_relu" and not layer_affine:
        assert not tensors  # GN-ReLU without affine keeps no state: nothing to place
        return
    assert tensors, spec  # (an EvoNorm without nonlinearity and affine has none: the other layer has)
    assert {(t.dtype, t.device.type) for t in tensors} == {(dtype, device)}, (spec, state)
    if device == "cpu" and dtype == torch.float64:
        out = converted(torch.randn(2, 3, 4, 4, dtype=dtype))
        assert out.dtype == dtype


# ---- 2. the benchmark's ratios -----------------------------------------------------------------

def kind_of(model: nn.Module) -> str:
    """What normalizes ``model``: an EvoNorm-S0 or -B0, a GroupNorm or a BatchNorm (read from its modules)."""
    for cls, kind in ((EvoNormS0, "evonorm_s0"), (EvoNormB0, "evonorm_b0"), (nn.GroupNorm, "gn"),
                      (nn.BatchNorm2d, "bn")):
        if any(isinstance(m, cls) for m in model.modules()):
            return kind
    raise AssertionError(f"no normalization in {type(model).__name__}")


class FixedCosts:
    """Stand-ins for the benchmark's timer and memory probe: each step is run once and costs what the
    kind of model it trained costs (a forward hook on every model says which model ran)."""

    # seconds of three timed repetitions (median, min) and peak MB, per kind of model
    SECONDS = {"evonorm_s0": [3.0, 4.5, 30.0], "gn": [2.0, 3.0, 2.5], "evonorm_b0": [4.0, 4.0, 4.0],
               "bn": [2.5, 2.5, 2.5]}
    MB = {"evonorm_s0": 130.0, "gn": 100.0, "evonorm_b0": 90.0, "bn": 100.0}

    def __init__(self) -> None:
        self.ran: list[nn.Module] = []
        self.kind_of_name: dict[str, str] = {}

    def watch(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        for model in models.values():
            model.register_forward_hook(lambda module, args, out: self.ran.append(module))
        return models

    def run(self, step) -> str:
        self.ran.clear()
        step()
        return kind_of(self.ran[-1])

    def times(self, steps, reps, warmup, device):
        out = {}
        for name, step in steps.items():
            kind = self.kind_of_name[name] = self.run(step)
            out[name] = [s / 1000 for s in self.SECONDS[kind]]
        return out

    def peak(self, step, device):
        return self.MB[self.run(step)] * 2**20


@pytest.mark.slow
def test_resnet50_step_ratios_are_evonorm_over_its_baseline(monkeypatch):
    """ResNet-50 steps with fixed costs: EvoNorm-S0 pairs with GN-ReLU, B0 with BN-ReLU (the paper's
    comparisons), each time ratio the median over rounds of EvoNorm over baseline in that round (S0: 3 / 2,
    4.5 / 3 and 30 / 2.5, so 1.5: the third round's stall does not move it), minimum 3 / 2 = 1.5, memory
    130 / 100, and the targets read a ratio above its limit as missed."""
    costs = FixedCosts()
    whole_models = bench.whole_models
    monkeypatch.setattr(bench, "whole_models", lambda arch, device, layout: costs.watch(whole_models(arch, device, layout)))
    monkeypatch.setattr(bench, "interleaved_times", costs.times)
    monkeypatch.setattr(bench, "peak_step_bytes", costs.peak)
    args = bench.parse_args(["--model-batch", "2", "--model-size", "32", "--model-reps", "3", "--threads", "1"])
    results = bench.bench_model(args, torch.device("cpu"), compiled=False)
    seconds, mb = FixedCosts.SECONDS, FixedCosts.MB
    pairs = {}
    for r in results:
        kinds = [costs.kind_of_name[name] for name in r.ms]
        evonorm = next(k for k in kinds if k.startswith("evonorm"))
        baseline = next(k for k in kinds if not k.startswith("evonorm"))
        pairs[evonorm] = baseline
        assert r.pair.startswith(next(n for n in r.ms if costs.kind_of_name[n] == evonorm))  # named EvoNorm first
        assert math.isclose(r.ratio, statistics.median(e / b for e, b in zip(seconds[evonorm], seconds[baseline])))
        assert math.isclose(r.min_ratio, min(seconds[evonorm]) / min(seconds[baseline]))
        assert math.isclose(r.memory_ratio, mb[evonorm] / mb[baseline])
    assert pairs == {"evonorm_s0": "gn", "evonorm_b0": "bn"}
    rows = {row["target"]: row for row in bench.target_rows([], results)}
    s0_time = next(row for t, row in rows.items() if "evonorm_s0" in t and "memory" not in t)
    s0_memory = next(row for t, row in rows.items() if "evonorm_s0" in t and "memory" in t)
    b0_memory = next(row for t, row in rows.items() if "evonorm_b0" in t and "memory" in t)
    assert math.isclose(s0_time["ratio"], 1.5) and s0_time["limit"] == 1.0 and not s0_time["met"]
    assert math.isclose(s0_memory["ratio"], 1.3) and s0_memory["limit"] == 1.0 and not s0_memory["met"]
    assert math.isclose(b0_memory["ratio"], 0.9) and b0_memory["met"]
    assert "time 1.50x (1.50-12.00x over 3 rounds; min 1.50x), peak memory 1.30x" in bench.format_model_lines(results)


def test_layer_table_ratios_are_each_layer_over_its_baseline(monkeypatch):
    """The layer table with fixed costs: EvoNorm-S0 over GN-SiLU 2.8 / 2.0 = 1.4 and EvoNorm-B0 over BN-ReLU
    1.6 / 2.0 = 0.8 against the 1.0 target; each baseline is 1.0. The roofline with a 0.5 ms copy_ (2 passes)
    and 8 passes per fwd+bwd: S0 moves at 8 * 0.5 / (2 * 2.8) = 0.714 of the copy rate, B0 at 1.25, both
    against the 0.5 target at 28 x 28 planes."""
    kinds = {EvoNormS0: 2.8, EvoNormB0: 1.6, nn.GroupNorm: 2.0, nn.BatchNorm2d: 2.0}
    ran: list[nn.Module] = []

    def watched(make):
        def build(channels):
            module = make(channels)
            module.register_forward_hook(lambda m, args, out: ran.append(m))
            return module
        return build

    def cost(module: nn.Module) -> float:
        return next(ms for cls, ms in kinds.items() if any(isinstance(m, cls) for m in module.modules()))

    def times(steps, reps, warmup, device, before=None):
        out = {}
        for name, step in steps.items():
            before()
            ran.clear()
            step()
            out[name] = [(0.5 if name == bench.COPY else cost(ran[-1])) / 1000] * reps
        return out

    monkeypatch.setattr(bench, "interleaved_times", times)
    factories = bench.layer_factories(False)
    names = ["evonorm_s0 (fused)", "evonorm_b0 (fused)", bench.GN_SILU, bench.BN_RELU]
    layers = {name: watched(factories[name]) for name in names}
    args = bench.parse_args(["--reps", "2", "--warmup", "0", "--threads", "1"])
    results = {r.layer: r for r in bench.bench_shape((2, 8, 28, 28), layers, [], args, torch.device("cpu"), torch.float32)}
    assert math.isclose(results["evonorm_s0 (fused)"].ratio, 1.4) and math.isclose(results["evonorm_b0 (fused)"].ratio, 0.8)
    assert results[bench.GN_SILU].ratio == 1.0 and results[bench.BN_RELU].ratio == 1.0
    assert math.isclose(results["evonorm_s0 (fused)"].roofline, 8 * 0.5 / (2 * 2.8))
    rows = bench.target_rows(list(results.values()), [])
    assert [(round(r["ratio"], 6), r["limit"], r["met"]) for r in rows] == [
        (1.4, 1.0, False), (round(8 * 0.5 / (2 * 2.8), 6), 0.5, True), (0.8, 1.0, True), (1.25, 0.5, True)]
    assert "MISS  1.40 <= 1.00" in bench.format_targets(rows) and "met   0.71 >= 0.50" in bench.format_targets(rows)
    small = bench.bench_shape((2, 8, 27, 27), layers, [], args, torch.device("cpu"), torch.float32)
    assert not any("copy rate" in r["target"] for r in bench.target_rows(small, []))  # planes below 28 x 28: no roofline


# ---- 5. the Fig. 10 comparison's reuse boundary --------------------------------------------------

class Accepting:
    """An executor that accepts every candidate with the same accuracy, two in flight (the reference first,
    then the candidates the latest first, so that they finish out of order), and can stop the search (as a
    kill would) after ``stop_after`` results."""

    capacity = 2

    def __init__(self, stop_after: int | None = None) -> None:
        self.pending: list[int] = []
        self.stop_after, self.returned = stop_after, 0

    def submit(self, candidate_id, genome):
        self.pending.append(candidate_id)

    def wait(self):
        if self.stop_after is not None and self.returned >= self.stop_after:
            raise KeyboardInterrupt
        self.returned += 1
        index = next((i for i, c in enumerate(self.pending) if c < 0), len(self.pending) - 1)
        return [(self.pending.pop(index), CandidateResult.accept({"a": 0.5}))]

    def close(self):
        pass


def search(folder, budget: int, stop_after: int | None = None, seed: int = 0) -> None:
    config = EvolutionConfig(mode="S", max_nodes=3, initial_population=2, window=10)
    runner = LayerSearch(config, Accepting(stop_after), folder, seed=seed, baselines={"gn_relu": parse("max(x, 0)")})
    try:
        runner.run(StopCondition(max_candidates=budget))
    except KeyboardInterrupt:
        pass


def recorded_ids(folder) -> set[int]:
    return {r.candidate_id for r in read_checkpoint(folder)["records"]}


@settings(max_examples=12, deadline=None)
@given(budget=st.integers(1, 6), seed=st.integers(0, 100))
def test_a_finished_search_is_complete_for_every_budget_up_to_its_own(tmp_path_factory, budget, seed):
    """The driver itself runs ``budget`` candidates (two at a time, so they finish out of order) and its
    reference; the comparison reuses the run for any budget up to that and only then."""
    out = tmp_path_factory.mktemp("fig10")
    folder = run_folder(out, "random", seed)
    search(folder, budget, seed=seed)
    assert recorded_ids(folder) == set(range(budget))  # the reference: what the log holds
    for asked in range(budget + 3):
        assert is_complete(folder, asked) is (asked <= budget), (asked, budget)
        assert run_cell(out, "random", seed, asked, []).finished() is (asked <= budget)


@settings(max_examples=12, deadline=None)
@given(budget=st.integers(2, 8), stop_after=st.integers(0, 5), seed=st.integers(0, 100))
def test_an_interrupted_search_is_never_complete_for_candidates_it_has_not_recorded(tmp_path_factory, budget,
                                                                                   stop_after, seed):
    """Killed with candidates (or its reference) still training: complete for a budget only if every
    candidate below the budget is in the log and the reference has been measured."""
    folder = tmp_path_factory.mktemp("killed") / "run"
    search(folder, budget, stop_after=stop_after, seed=seed)
    if not (folder / "checkpoint.json").is_file():
        assert not is_complete(folder, 1)
        return
    state = read_checkpoint(folder)
    recorded, reference_done = recorded_ids(folder), "gn_relu" in state["baselines"]
    for asked in range(1, budget + 3):
        if is_complete(folder, asked):
            assert set(range(asked)) <= recorded and reference_done, (asked, sorted(recorded), state["in_flight"])


# ---- 6. data order across epochs in distributed sampling -----------------------------------------

IMAGES = 60  # training images, each filled with its own index


def numbered_digits(config):
    images = torch.arange(IMAGES, dtype=torch.float32).view(-1, 1, 1, 1).expand(IMAGES, 3, 8, 8).clone()
    labels = torch.arange(IMAGES) % 10
    return images, labels, images[:20].clone(), labels[:20].clone()


def run_recording(tmp_path, monkeypatch, rank: int, **overrides) -> list[list[int]]:
    """The image indices each step of a 2-process run's rank ``rank`` trains on (no training done)."""
    seen: list[list[int]] = []

    class RankOfTwo(DistributedContext):
        distributed = False  # no process group: each rank is run on its own here

        @classmethod
        def from_env(cls):
            return cls(rank=rank, world_size=2)

    def step(self, images, labels):
        seen.append([int(v) for v in images[:, 0, 0, 0]])
        return 0.0

    monkeypatch.setattr(train_module, "DistributedContext", RankOfTwo)
    monkeypatch.setattr(train_module, "load_in_memory", numbered_digits)
    monkeypatch.setattr(train_module, "evaluate", lambda *args: {"top1": 50.0, "loss": 1.0})
    monkeypatch.setattr(Trainer, "step", step)
    config = TrainConfig(model="mobilenetv2_cifar", norm_act="evonorm_s0", image_size=8, batch_size=8, epochs=3,
                         base_lr=0.1, warmup_epochs=0, schedule="constant", progress=False,
                         output_dir=str(tmp_path / f"rank{rank}"))
    train_module.train(dataclasses.replace(config, **overrides))
    return seen


STEPS_PER_EPOCH = (IMAGES // 2) // 8  # each process: 30 images, batches of 8, the last partial one dropped


def epochs_of(steps: list[list[int]]) -> list[list[int]]:
    return [sum(steps[e * STEPS_PER_EPOCH:(e + 1) * STEPS_PER_EPOCH], []) for e in range(len(steps) // STEPS_PER_EPOCH)]


def test_each_epoch_is_a_new_disjoint_sharding_that_a_resumed_run_sees_too(tmp_path, monkeypatch):
    ranks = [epochs_of(run_recording(tmp_path / "a", monkeypatch, rank)) for rank in (0, 1)]
    assert [len(epochs) for epochs in ranks] == [3, 3]
    for epoch in range(3):
        first, second = ranks[0][epoch], ranks[1][epoch]
        assert len(set(first)) == len(first) == 24 and len(set(second)) == 24  # no image twice in a shard
        assert not set(first) & set(second)  # the processes share out the epoch
    for epochs in ranks:  # a new order every epoch, not only a new batching
        assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and set(epochs[0]) != set(epochs[1])
    assert epochs_of(run_recording(tmp_path / "b", monkeypatch, 0)) == ranks[0]  # the seed decides it
    assert epochs_of(run_recording(tmp_path / "c", monkeypatch, 0, seed=1))[0] != ranks[0][0]
    # stopped after the first epoch and resumed: the later epochs are the uninterrupted run's
    run_recording(tmp_path / "d", monkeypatch, 0, max_steps=STEPS_PER_EPOCH)
    resumed = epochs_of(run_recording(tmp_path / "d", monkeypatch, 0, resume=True))
    assert resumed == ranks[0][1:]


# ---- 7. train/eval mode owned by the callee -------------------------------------------------------

def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         evonorm_core.build_norm_act("evonorm_b0", 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 3)).double()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("left_in_eval", [True, False])
def test_a_step_trains_in_training_mode_whatever_mode_the_caller_left(left_in_eval, workers):
    """The step's loss, gradient (the first momentum buffer of SGD without weight decay) and moving
    averages are those of a copy run in training mode by hand (each worker's half on its own)."""
    model = small_model()
    reference = copy.deepcopy(model).train()
    model.train(not left_in_eval)
    x = torch.randn(8, 3, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2 + 1
    y = torch.arange(8) % 3
    trainer = Trainer(model, OptimizerSettings("sgd", lr=0.1, weight_decay=0.0), ScheduleSettings("constant", 10),
                      workers=workers)
    loss = trainer.step(x, y)
    logits = torch.cat([reference(part) for part in x.chunk(workers)])
    expected = F.cross_entropy(logits, y)
    expected.backward()
    assert math.isclose(loss, expected.item(), rel_tol=1e-12)
    state = trainer.optimizer.state
    for (name, param), ref_param in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(state[param]["momentum_buffer"], ref_param.grad, rtol=1e-10, atol=1e-12, msg=name)
    for (name, buffer), ref_buffer in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(buffer, ref_buffer, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.slow
def test_a_classification_run_trains_in_training_mode_and_evaluates_in_eval_mode(tmp_path):
    """Every forward pass of a run (two epochs, evaluated after each) read by hooks on its normalization
    layers: with gradients in training mode, without (evaluation) in eval mode."""
    passes: list[tuple[bool, bool]] = []
    build = train_module.build

    def watched_build(config, env):
        setup = build(config, env)
        for module in setup.model.modules():
            if isinstance(module, evonorm_core.layers.NormAct2d):
                module.register_forward_pre_hook(lambda m, args: passes.append((torch.is_grad_enabled(), m.training)))
        return setup

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(train_module, "build", watched_build)
        train_module.train(TrainConfig(model="mobilenetv2_cifar", norm_act="bn_relu", image_size=8, train_subset=32,
                                       batch_size=16, epochs=2, base_lr=0.1, warmup_epochs=0, progress=False,
                                       output_dir=str(tmp_path / "run")))
    training = [mode for grad, mode in passes if grad]
    evaluation = [mode for grad, mode in passes if not grad]
    assert training and evaluation
    assert all(training) and not any(evaluation)
