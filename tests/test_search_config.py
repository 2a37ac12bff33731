"""The search's settings against the paper's text, and what the evolution does with them.

The expected values below are typed from the paper (Appendix B "Proxy Task on CIFAR-10" and
"Evolution", section 4.4 "Rejection Protocols", section 3 "Search Space"), not read from
the code's constants.
"""
import dataclasses
import math
import random
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evonorm_core.classifiers.optimizer import OptimizerSettings
from evonorm_core.classifiers.proxy_task import PROXY_TRAINING
from evonorm_core.experiment.config import ConfigError
from evonorm_core.search import EvolutionConfig, Member, parse, to_infix
from evonorm_core.search.evolution import Proposer
from evonorm_core.search.rejection import conv_weights, worst_case_gradient_norm
from evonorm_suite.search.config import DEFAULT_REFERENCES, REFERENCE_LAYERS, SearchConfig
from evonorm_suite.search.presets import preset
from evonorm_suite.search.proxy import ProxyConfig, ProxyEvaluator, _AnchorTraining
from tests.search_helpers import distinct_response

ANCHORS = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_cifar")


@pytest.mark.parametrize("mode, steps, schedule", [("B", 2000, "constant"), ("S", 5000, "cosine")])
def test_paper_preset_is_the_papers_proxy_and_evolution(mode, steps, schedule):
    config = preset("paper", mode)
    proxy, evolution = config.proxy, config.evolution
    # Appendix B, proxy task: "24 x 24 random crops on CIFAR-10 with a batch size of 128 for training, and use the
    # original 32 x 32 image with a batch size of 512 for validation. SGD with learning rate 0.1, Nesterov momentum
    # 0.9 and weight decay 1e-4. ... 2000 steps with a constant learning rate for the EvoNorm-B experiment ...
    # 5000 steps following a cosine learning rate schedule for the EvoNorm-S experiment."
    assert (proxy.anchors, proxy.anchor_depth, proxy.data, proxy.validation) == (ANCHORS, 1.0, "cifar10", "full")
    assert (proxy.image_size, proxy.crop_size, proxy.batch_size, proxy.eval_batch_size) == (32, 24, 128, 512)
    assert (proxy.lr, proxy.weight_decay) == (0.1, 1e-4)
    assert (proxy.train_steps, proxy.schedule) == (steps, schedule)
    # Section 4.4: "less than 20% validation accuracy in 100 training steps on any of the three anchor
    # architectures"; "ascending ... for 100 steps. Layers with the worst-case gradient norm greater than 10^8".
    assert (proxy.quality_steps, proxy.quality_threshold) == (100, 0.2)
    assert (proxy.stability_steps, proxy.stability_threshold, proxy.stability_anchors, proxy.stability_depth) == (
        100, 1e8, None, None)
    assert proxy.recalibration_batches == 0
    # Appendix B, evolution: "sliding window of only the most recent 2500 genotypes. Each tournament is formed by
    # a random subset of 5% of the active population. Winner is ... a random candidate on the Pareto-frontier ...
    # mutated twice ... replacing the offspring with a completely new random architecture with probability 0.5."
    assert (evolution.window, evolution.tournament_fraction, evolution.selection) == (2500, 0.05, "pareto")
    assert (evolution.mutations, evolution.random_offspring_probability) == (2, 0.5)
    # Section 3: 4 initial nodes + at most 10 intermediate ones (blog: "4 + 10 = 14").
    assert evolution.max_nodes == 10
    # Section 4.4 "We discard layers ..." (blog: "A layer must pass both tests to be added to the population").
    assert evolution.admit_quality_rejected is False
    # Not in the paper: the initial random population (25) and the absence of any time limit.
    assert evolution.initial_population == 25
    assert (config.time_budget, config.time_limit, config.max_candidates) == (None, None, None)
    assert (evolution.mode, config.references) == (mode, DEFAULT_REFERENCES[mode])


@pytest.mark.parametrize("mode", ["B", "S"])
def test_cpu_preset_keeps_the_papers_anchors_stages_and_evolution_rules(mode):
    config = preset("cpu", mode)
    assert config.proxy.anchors == ANCHORS and config.proxy.quality_threshold == 0.2
    assert config.proxy.stability_threshold == 1e8 and config.proxy.stability_steps > 0
    assert config.proxy.schedule == "constant"  # both modes: measured in docs/search.md
    assert preset("paper", mode).proxy.schedule == ("constant" if mode == "B" else "cosine")
    evolution = config.evolution
    assert (evolution.tournament_fraction, evolution.mutations, evolution.random_offspring_probability,
            evolution.selection, evolution.max_nodes, evolution.mode) == (0.05, 2, 0.5, "pareto", 10, mode)
    # MobileNetV2-CIFAR reduces 8x (three strided stages after the two the paper unstrides): a map larger than 1x1
    # at the end needs more than 8 px (the paper's 24 px crops end at 3x3).
    assert config.proxy.crop_size > 8 and config.proxy.image_size > 8


def test_reference_layers_are_the_papers_formulas():
    # Table 2 / Table 3 expressions, written as genomes (BN's and GN's affine as v1/v0, B1's constant 1 as v1).
    assert DEFAULT_REFERENCES == {"B": ("bn_relu", "evonorm_b0", "evonorm_b1", "evonorm_b2"),
                                  "S": ("gn_relu", "evonorm_s0", "evonorm_s1", "evonorm_s2")}
    x = torch.randn(4, 8, 3, 3, dtype=torch.float64) * 2 + 0.3
    eps = 1e-10
    batch_var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    instance_var = x.var(dim=(2, 3), unbiased=False, keepdim=True)
    instance_ms = x.square().mean(dim=(2, 3), keepdim=True)
    grouped = x.view(4, 4, 2, 3, 3)
    group_var = grouped.var(dim=(2, 3, 4), unbiased=False, keepdim=True).expand_as(grouped).reshape(x.shape)
    group_ms = grouped.square().mean(dim=(2, 3, 4), keepdim=True).expand_as(grouped).reshape(x.shape)
    expected = {
        "evonorm_b0": x / torch.maximum(batch_var.sqrt(), x + instance_var.sqrt()),
        "evonorm_b1": x / torch.maximum(batch_var.sqrt(), (x + 1) * instance_ms.sqrt()),
        "evonorm_b2": x / torch.maximum(batch_var.sqrt(), instance_ms.sqrt() - x),
        "evonorm_s0": x * torch.sigmoid(x) / group_var.sqrt(),
        "evonorm_s1": x * torch.sigmoid(x) / group_var.sqrt(),
        "evonorm_s2": x * torch.sigmoid(x) / group_ms.sqrt(),
        "bn_relu": torch.relu((x - x.mean(dim=(0, 2, 3), keepdim=True)) / batch_var.sqrt()),
    }
    from evonorm_core.search import GraphLayer

    for name, want in expected.items():
        layer = GraphLayer(parse(REFERENCE_LAYERS[name]), 8, eps=eps, groups=4).double()
        torch.testing.assert_close(layer(x), want, rtol=1e-6, atol=1e-6, msg=name)


def test_tournament_samples_the_stated_fraction_uniformly():
    class Recording(random.Random):
        sizes: list

        def sample(self, population, k, **kwargs):
            self.sizes.append((len(population), k))
            picked = super().sample(population, k, **kwargs)
            chosen.update(m.candidate_id for m in picked)
            return picked

    chosen: Counter = Counter()
    rng = Recording(0)
    rng.sizes = []
    proposer = Proposer(EvolutionConfig(window=2500, tournament_fraction=0.05, initial_population=1), rng)
    for i in range(400):
        proposer.add(Member(i, parse("tanh(x)"), (random.Random(i).random(),), response=distinct_response(i)))
    for _ in range(300):
        proposer.select()
    assert set(rng.sizes) == {(400, 20)}  # 5% of 400
    # every member is drawn about 300 * 20 / 400 = 15 times: no bias towards the front or back of the window
    assert len(chosen) > 380 and max(chosen.values()) < 40
    small = Proposer(EvolutionConfig(tournament_fraction=0.05), random.Random(0))
    for i in range(10):
        small.add(Member(i, parse("tanh(x)"), (0.5,), response=distinct_response(i)))
    assert small.config.tournament_size(10) == 2 and small.config.tournament_size(1) == 1  # at least 2 (if possible)


@pytest.mark.parametrize("probability", [0.0, 0.3, 1.0])
def test_offspring_is_replaced_by_a_random_graph_with_the_stated_probability(probability):
    """Appendix C: "replacing the offspring with a completely new random architecture with probability
    0.5"; the setting is the probability of a replacement, whatever its value."""
    proposer = Proposer(EvolutionConfig(random_offspring_probability=probability, initial_population=2),
                        random.Random(0))
    for i in range(20):
        proposer.add(Member(i, parse("tanh(x)"), (0.5,), response=distinct_response(i)))
    origins = Counter(proposer.propose()[1] for _ in range(1000))
    assert origins["random"] / 1000 == pytest.approx(probability, abs=0.05)


@pytest.mark.parametrize("probability, draw, origin", [
    (0.0, 0.0, "mutation"), (0.3, 0.3, "mutation"), (0.3, math.nextafter(0.3, 0.0), "random"),
    (1.0, math.nextafter(1.0, 0.0), "random"), (1.0, 0.0, "random")])
def test_offspring_is_replaced_exactly_when_the_draw_is_below_the_probability(monkeypatch, probability, draw, origin):
    """``rng.random()`` is uniform on [0, 1), so replacing the offspring when the draw is below the probability
    (and only then) replaces it with that probability exactly: a probability of 0 never replaces, not even on a
    draw of 0.0, and a draw equal to the probability keeps the mutated offspring."""
    from evonorm_core.search import evolution

    class Draws(random.Random):
        def random(self):  # the replacement draw; sample and choice still draw from getrandbits
            return draw

        def getrandbits(self, k):
            return super().getrandbits(k)

    offspring, fresh = parse("tanh(x) * v1"), parse("exp(x)")
    monkeypatch.setattr(evolution, "mutate", lambda genome, rng, mode="B": offspring)
    monkeypatch.setattr(evolution, "random_genome", lambda rng, mode, max_nodes: fresh)
    proposer = Proposer(EvolutionConfig(random_offspring_probability=probability, initial_population=1), Draws(0))
    proposer.add(Member(7, parse("tanh(x)"), (0.5,), response=distinct_response(0)))
    want = (offspring, "mutation", 7) if origin == "mutation" else (fresh, "random", None)
    assert proposer.propose() == want


@pytest.mark.parametrize("initial", [1, 3, 25])
def test_tournaments_start_once_the_population_holds_initial_population(initial):
    """Evolution's contract (and the paper's warm start): while the population holds fewer than
    ``initial_population`` members every proposal is a random graph; the proposal made when it holds
    exactly that many is the first tournament's offspring (random offspring switched off here)."""
    proposer = Proposer(EvolutionConfig(initial_population=initial, random_offspring_probability=0.0),
                        random.Random(0))
    origins = []
    for i in range(initial + 2):
        origins.append(proposer.propose()[1])
        proposer.add(Member(i, parse("tanh(x)"), (0.5,), response=distinct_response(i)))
    assert origins == ["random"] * initial + ["mutation"] * 2


@pytest.mark.parametrize("mode", ["B", "S"])
def test_proxy_trains_with_the_papers_optimizer(mode):
    """Appendix C: "SGD with learning rate 0.1, Nesterov momentum 0.9 and weight decay 10^-4" (batch 128):
    what the optimizer of an anchor run holds, not only the preset's fields."""
    config = preset("paper", mode).proxy
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 22 * 22, 10))
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % 10
    optimizer = _AnchorTraining(model, config, (images, labels, images, labels), seed=0).trainer.optimizer
    groups = {g["weight_decay"]: g for g in optimizer.param_groups}
    assert set(groups) == {1e-4, 0.0} and isinstance(optimizer, torch.optim.SGD)
    assert {(g["lr"], g["momentum"], g["nesterov"]) for g in optimizer.param_groups} == {(0.1, 0.9, True)}
    assert {id(p) for p in groups[1e-4]["params"]} == {id(model[0].weight), id(model[2].weight)}


def test_stability_test_ascends_the_gradient_norm():
    """The adversarial step moves the conv weights *up* the gradient norm: after the test, the
    norm at the moved weights is larger than at the start (a descent would make it smaller)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 8, 3, padding=1), nn.Tanh(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    inputs, targets = torch.randn(16, 3, 6, 6), torch.arange(16) % 4

    def loss_fn(m):
        return F.cross_entropy(m(inputs), targets)

    def gradient_norm() -> float:
        grads = torch.autograd.grad(loss_fn(model), conv_weights(model))
        return torch.sqrt(sum(g.square().sum() for g in grads)).item()

    start = gradient_norm()
    worst, steps = worst_case_gradient_norm(model, loss_fn, steps=5, lr=0.5, threshold=1e8)
    after = gradient_norm()
    assert steps == 5
    assert after > start * 1.05, (start, after)
    assert worst >= after * 0.999 or worst >= start  # the largest norm seen is reported


def test_config_round_trips_and_a_resumed_search_changes_only_its_stop_conditions_and_workers():
    config = preset("cpu", "S")
    from evonorm_core.experiment.config import config_from_dict, config_to_dict, fixed_on_resume, resumable_options

    assert config_from_dict(SearchConfig, config_to_dict(config)) == config
    assert resumable_options(SearchConfig) == ("max_candidates", "time_budget", "time_limit", "workers", "threads",
                                               "backend", "ray_address")
    fixed = fixed_on_resume(SearchConfig)
    assert "proxy.lr" in fixed and "evolution.mode" in fixed and "seed" in fixed and "references" in fixed


@pytest.mark.parametrize("mode", ["B", "S"])
def test_cpu_preset_is_the_documented_table(mode):
    """docs/search.md, "Choosing the CPU preset": every value of the table's CPU column."""
    config = preset("cpu", mode)
    proxy, evolution = config.proxy, config.evolution
    assert (proxy.data, proxy.validation, proxy.anchor_depth, proxy.lr) == ("mnist", "centre", 0.01, 0.03)
    assert (proxy.image_size, proxy.crop_size, proxy.batch_size, proxy.eval_batch_size) == (28, 24, 32, 64)
    assert (proxy.quality_steps, proxy.quality_threshold, proxy.train_steps) == (50, 0.2, 100)
    assert (proxy.stability_steps, proxy.stability_anchors, proxy.stability_depth, proxy.stability_batch_size,
            proxy.stability_lr, proxy.stability_threshold) == (10, ("mobilenetv2_cifar",), 1.0, 8, 0.05, 1e8)
    assert (proxy.recalibration_batches, proxy.bn_momentum) == (4, 0.1)
    assert (evolution.window, evolution.tournament_fraction, evolution.initial_population) == (100, 0.05, 4)
    assert (evolution.admit_quality_rejected, evolution.population_from_references) == (False, True)
    assert proxy.schedule == "constant"
    assert (config.time_budget, config.time_limit, config.preset) == (780.0, 600.0, "cpu")
    assert (config.workers, config.torch_threads, config.references) == (2, 1, DEFAULT_REFERENCES[mode])


@pytest.mark.parametrize("schedule, halfway", [("constant", 1.0), ("cosine", 0.5)])
def test_proxy_schedule_spans_the_whole_training(schedule, halfway):
    """Appendix C: "2000 steps with a constant learning rate" (B) / "5000 steps following a cosine learning
    rate schedule" (S): the schedule runs over ``train_steps`` (not the quality steps), from ``lr`` at step 0,
    0.5 * (1 + cos(pi * t / T)) for cosine."""
    config = dataclasses.replace(preset("paper", "B").proxy, schedule=schedule, train_steps=40, quality_steps=10,
                                 batch_size=64, lr=0.2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 22 * 22, 10))
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % 10
    trainer = _AnchorTraining(model, config, (images, labels, images, labels), seed=0).trainer
    factor = trainer.scheduler.lr_lambdas[0]
    assert trainer.lr == pytest.approx(0.2)  # lr at the proxy's own batch, not rescaled by 256
    assert [factor(0), factor(20)] == pytest.approx([1.0, halfway])
    assert factor(10) == pytest.approx(1.0 if schedule == "constant" else 0.5 * (1 + math.cos(math.pi / 4)))


def test_mutation_is_applied_the_configured_number_of_times_in_a_chain(monkeypatch):
    """Appendix C: the tournament winner "is mutated twice": each mutation applies to the previous one's result,
    starting from the winner's genome, in the search's mode; the offspring is the last result."""
    from evonorm_core.search import evolution

    calls = []

    def recording_mutate(genome, rng, mode="B"):
        child = parse(f"tanh({to_infix(genome)})")
        calls.append((genome, child, mode))
        return child

    monkeypatch.setattr(evolution, "mutate", recording_mutate)
    for mutations in (1, 2, 3):
        proposer = Proposer(EvolutionConfig(mode="S", mutations=mutations, initial_population=1,
                                            random_offspring_probability=0.0), random.Random(0))
        proposer.add(Member(7, parse("x * v1"), (0.5,)))
        calls.clear()
        child, origin, parent = proposer.propose()
        assert (origin, parent, len(calls)) == ("mutation", 7, mutations)
        assert calls[0][0] == parse("x * v1") and child == calls[-1][1]
        assert all(calls[i][1] == calls[i + 1][0] for i in range(mutations - 1))
        assert {mode for _, _, mode in calls} == {"S"}


@pytest.mark.parametrize("strategy", ["evolution", "random"])
def test_proposals_stay_in_the_mode_and_the_node_limit(strategy):
    """S mode (section 5.2): no batch-dependent op in any proposal, random or mutated; random graphs have
    ``max_nodes`` intermediate nodes, and mutations keep the size."""
    from evonorm_core.search import check_mode

    proposer = Proposer(EvolutionConfig(mode="S", strategy=strategy, max_nodes=4, initial_population=2),
                        random.Random(1))
    for i in range(3):
        proposer.add(Member(i, parse("x * sigmoid(v1 * x) / group_std(x)"), (0.5 + i / 10,), response=distinct_response(i)))
    origins = Counter()
    for _ in range(200):
        genome, origin, _ = proposer.propose()
        origins[origin] += 1
        check_mode(genome, "S")
        assert len(genome.nodes) == (4 if origin == "random" else 5)
    assert origins["mutation"] > 50 if strategy == "evolution" else origins["mutation"] == 0


def test_durations_and_threads_of_the_run_settings():
    from evonorm_suite.search.config import parse_duration

    assert [parse_duration(t) for t in ("900", "900s", "15m", "1.5h", " 2M ")] == [900.0, 900.0, 900.0, 5400.0, 120.0]
    # docs/search.md: "--threads torch threads each (default 2 // workers)", at least 1
    assert [SearchConfig(workers=w).torch_threads for w in (1, 2, 3)] == [2, 1, 1]
    assert SearchConfig(workers=2, threads=3).torch_threads == 3
    assert list(SearchConfig(references=("evonorm_s0", "bn_relu")).reference_genomes()) == ["evonorm_s0", "bn_relu"]
    assert SearchConfig(references=("none",)).reference_genomes() == {}


def test_mode_s_starts_from_the_s_preset():
    """``--mode S`` picks the preset's S configuration: GN-ReLU and the S series as references (Table 3),
    S-mode evolution (with ``--preset paper``: its cosine fitness schedule); flags given still win."""
    from evonorm_suite.search import evolve

    config = evolve.resolve_config(evolve.build_parser().parse_args(["--mode", "S", "--lr", "0.05"]))
    assert config.evolution.mode == "S" and config.references == DEFAULT_REFERENCES["S"] and config.proxy.lr == 0.05
    paper_s = evolve.resolve_config(evolve.build_parser().parse_args(["--mode", "S", "--preset", "paper"]))
    assert (paper_s.proxy.schedule, paper_s.proxy.train_steps) == ("cosine", 5000)
    paper = evolve.resolve_config(evolve.build_parser().parse_args(["--preset", "paper"]))
    assert (paper.proxy.train_steps, paper.evolution.window, paper.preset) == (2000, 2500, "paper")


def test_proxy_models_start_from_the_seed_not_the_global_random_state():
    """Every candidate is trained from the evaluator's seed (module docstring of evonorm_suite.search.proxy):
    two builds of the same layer with the global generator moved in between start from identical weights,
    and a different seed gives different ones."""
    genome = parse(REFERENCE_LAYERS["evonorm_b0"])
    evaluator = ProxyEvaluator(ProxyConfig(anchor_depth=0.01), seed=3)
    first = evaluator.build("resnet50_cifar", genome).state_dict()
    torch.manual_seed(12345)
    torch.rand(7)
    second = evaluator.build("resnet50_cifar", genome).state_dict()
    other = ProxyEvaluator(ProxyConfig(anchor_depth=0.01), seed=4).build("resnet50_cifar", genome).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize("changes, message", [
    ({"anchors": ()}, r"^--anchors must name at least one anchor$"),
    ({"image_size": 16, "crop_size": 20}, r"^--crop-size must be <= --image-size \(16\), got 20$"),
    ({"train_steps": 50, "quality_steps": 60}, r"^--quality-steps must be <= --train-steps \(50\), got 60$"),
])
def test_proxy_config_refuses_inconsistent_options_naming_the_flags(changes, message):
    with pytest.raises(ConfigError, match=message):
        ProxyConfig(**changes)


def test_proxy_config_optimizer_is_the_proxy_task_s_with_its_own_rate_and_decay():
    cfg = ProxyConfig(lr=0.05, weight_decay=3e-4)
    assert cfg.optimizer_settings() == OptimizerSettings(PROXY_TRAINING.optimizer.name, lr=0.05, weight_decay=3e-4)
    assert PROXY_TRAINING.optimizer.name == "sgd" and OptimizerSettings(lr=0.05).weight_decay != 3e-4
