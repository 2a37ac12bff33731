"""Property-based tests of a genome's graph properties against a brute-force evaluation.

The reference (``property_strategies``) evaluates every node, dead ones included, and finds by
NaN poisoning which nodes the output reads (liveness) and which nodes are computed from ``x``;
batch dependence is read off the layer's outputs (a sample's output with the rest of the batch
changed). Checked against it: ``live_nodes``, ``live_ops``, ``pruned``,
``uses_batch_statistics`` (the genome's, the ``GraphLayer``'s, the norm-act maker's, a model's),
``aggregates_input``, which parameters and moving averages a ``GraphLayer`` creates, and that the
equivalence fingerprint is a property of the function, not of the graph's dead nodes, argument
order or numbering.
"""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from torch import nn

import evonorm_core
from evonorm_core.running_stats import batch_statistics_layers
from evonorm_core.search import Genome, GraphLayer, Node, fingerprint, genome_norm_act, parse
from evonorm_core.search.primitives import PRIMITIVES

from .property_strategies import (
    N_INITIAL,
    brute_force_live,
    brute_force_reads_x,
    evaluate_nodes,
    genomes,
    output_of,
    same_values,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.filter_too_much])
SHAPE = (3, 4, 2, 3)  # 4 channels in 2 groups
# a dead batch statistic beside a live pointwise output, and the other way round
DEAD_BATCH = Genome((Node("batch_std", (0,)), Node("tanh", (0,))))
LIVE_BATCH_AFTER_DEAD = Genome((Node("instance_std", (0,)), Node("batch_mean", (0,)), Node("div", (0, 5))))


def probe(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=generator, dtype=torch.float64) * 2 + 0.3
    v0, v1 = torch.randn(2, SHAPE[1], generator=generator, dtype=torch.float64)
    return x, v0, v1


def live_by_poisoning(genome: Genome, seed: int = 0) -> set[int]:
    live = brute_force_live(genome, *probe(seed))
    assume(live is not None)  # an output that is NaN everywhere anyway cannot show which nodes reach it
    return live


def batch_nodes(genome: Genome, nodes) -> set[int]:
    return {i for i in nodes if i >= N_INITIAL and PRIMITIVES[genome.node(i).op].uses_batch_statistics}


@SETTINGS
@given(genome=genomes(max_nodes=8, arithmetic_weight=0.3), seed=st.integers(0, 2**16))
@example(genome=DEAD_BATCH, seed=0)
@example(genome=LIVE_BATCH_AFTER_DEAD, seed=0)
def test_live_nodes_are_those_whose_poisoning_reaches_the_output(genome, seed):
    """``live_nodes`` is exactly the set of nodes (initial ones included) whose NaN turns the
    output into NaN; ``live_ops`` their ops in order; ``pruned`` keeps those nodes only and the
    output bit for bit."""
    live = live_by_poisoning(genome, seed)
    assert set(genome.live_nodes()) == live
    assert genome.live_ops() == [genome.node(i).op for i in sorted(live) if i >= N_INITIAL]
    pruned = genome.pruned()
    assert len(pruned.nodes) == len([i for i in live if i >= N_INITIAL])
    x, v0, v1 = probe(seed)
    assert same_values(output_of(pruned, x, v0, v1), output_of(genome, x, v0, v1))
    assert set(pruned.live_nodes()) >= set(range(N_INITIAL, pruned.output + 1))  # nothing dead is left


@SETTINGS
@given(genome=genomes(max_nodes=8, arithmetic_weight=0.3), seed=st.integers(0, 2**16))
@example(genome=DEAD_BATCH, seed=0)
@example(genome=LIVE_BATCH_AFTER_DEAD, seed=0)
@example(genome=parse("tanh(x) + 0 * batch_mean(v1)"), seed=0)
def test_batch_dependence_is_that_of_the_live_graph(genome, seed):
    """Whether a searched layer uses batch statistics is whether a *live* node is a batch
    aggregation, wherever it is asked: the genome, its ``GraphLayer`` (which then alone keeps
    moving averages and counts batches), the maker ``genome_norm_act`` hands to models,
    ``evonorm_core.uses_batch_statistics`` of that maker and of a model built with it."""
    live = live_by_poisoning(genome, seed)
    expected = bool(batch_nodes(genome, live))
    assert genome.uses_batch_statistics() is expected
    layer = GraphLayer(genome, SHAPE[1], groups=2).double()
    assert layer.uses_batch_statistics is expected
    make = genome_norm_act(genome, groups=2)
    assert make.uses_batch_statistics is expected and evonorm_core.uses_batch_statistics(make) is expected
    model = nn.Sequential(nn.Conv2d(2, SHAPE[1], 1), make(SHAPE[1], True), make(SHAPE[1], False))
    assert bool(batch_statistics_layers(model)) is expected and evonorm_core.uses_batch_statistics(model) is expected
    # moving averages exist for the live batch aggregations only, and v0/v1 only where the graph reads them
    kinds = {"batch_mean": "mean", "batch_std": "var", "batch_rms": "mean_square"}
    expected_buffers = {f"running_{kinds[genome.node(i).op]}_{i}" for i in batch_nodes(genome, live)}
    assert {name for name, _ in layer.named_buffers() if name.startswith("running_")} == expected_buffers
    assert {name for name, _ in layer.named_parameters()} == {"weight", "bias"} | {
        name for index, name in ((2, "v0"), (3, "v1")) if index in live}
    x, _, _ = probe(seed)
    layer(x)
    assert int(getattr(layer, "num_batches_tracked", torch.tensor(0))) == int(expected)


@SETTINGS
@given(genome=genomes(max_nodes=7, arithmetic_weight=0.3), seed=st.integers(0, 2**16))
@example(genome=DEAD_BATCH, seed=0)
def test_a_layer_without_live_batch_statistics_treats_every_sample_alone(genome, seed):
    """The behaviour behind the flag: a layer the brute force finds no live batch aggregation in
    gives a sample the same output whatever the other samples of the batch are, in training;
    every layer does in eval (moving averages)."""
    live = live_by_poisoning(genome, seed)
    layer = GraphLayer(genome, SHAPE[1], groups=2).double()
    x, _, _ = probe(seed)
    other = torch.cat([x[:1], 7 * torch.randn(SHAPE[0] - 1, *SHAPE[1:], dtype=torch.float64) - 3])
    for training in (True, False):
        if training and batch_nodes(genome, live):
            continue
        layer.train(training)
        with torch.no_grad():
            alone, among_others = layer(x)[:1], layer(other)[:1]
        assert torch.allclose(alone, among_others, rtol=1e-12, atol=1e-12, equal_nan=True), (training, genome)


@SETTINGS
@given(genome=genomes(max_nodes=8, arithmetic_weight=0.3), seed=st.integers(0, 2**16))
@example(genome=parse("tanh(x) + instance_mean(v1)"), seed=0)
@example(genome=Genome((Node("instance_std", (0,)), Node("tanh", (0,)))), seed=0)
@example(genome=parse("x / instance_std(tanh(x))"), seed=0)
def test_aggregates_input_is_a_live_statistic_of_something_computed_from_x(genome, seed):
    """``aggregates_input``: some live aggregation reads a node computed from x (brute force: NaN
    in x reaches that node); without one, the layer is pointwise in x: changing x elsewhere leaves
    an element's output alone."""
    x, v0, v1 = probe(seed)
    live = live_by_poisoning(genome, seed)
    unpoisoned = evaluate_nodes(genome, x, v0, v1)
    assume(not any(torch.isnan(value).all() for value in unpoisoned.values()))  # x-dependence must be visible
    reads_x = brute_force_reads_x(genome, x, v0, v1)
    expected = any(PRIMITIVES[genome.node(i).op].aggregation and reads_x.intersection(genome.node(i).inputs)
                   for i in live if i >= N_INITIAL)
    assert genome.aggregates_input() is expected
    if not expected:
        changed = x.clone()
        changed[:, :, 1:, :] += 5.0  # every element but those of the first row
        first = output_of(genome, x, v0, v1)[:, :, :1, :]
        assert same_values(output_of(genome, changed, v0, v1)[:, :, :1, :], first)


def with_dead_node(genome: Genome, data) -> Genome:
    """``genome`` with one node nobody reads inserted at a random place (later inputs renumbered)."""
    position = data.draw(st.integers(0, len(genome.nodes) - 1), label="position")
    index = N_INITIAL + position
    op = data.draw(st.sampled_from(sorted(PRIMITIVES)), label="dead op")
    dead = Node(op, tuple(data.draw(st.integers(0, index - 1)) for _ in range(PRIMITIVES[op].arity)))
    shifted = [Node(n.op, tuple(i + (i >= index) for i in n.inputs)) for n in genome.nodes[position:]]
    return Genome((*genome.nodes[:position], dead, *shifted))


def with_swapped_arguments(genome: Genome) -> Genome:
    """Every ``+``, ``*`` and ``max`` with its two operands swapped (the same values exactly)."""
    return Genome(tuple(Node(n.op, n.inputs[::-1]) if n.op in ("add", "mul", "max") else n for n in genome.nodes))


@settings(max_examples=60, deadline=None)
@given(genome=genomes(max_nodes=6, arithmetic_weight=0.3), data=st.data())
def test_the_fingerprint_is_a_property_of_the_function(genome, data):
    """Graphs that compute the same values exactly share a fingerprint: with a dead node
    inserted anywhere (a dead batch statistic included), with commutative operands swapped,
    pruned, or with the output wrapped in ``-(-(.))`` or ``max(., .)``."""
    reference = fingerprint(genome)
    output = genome.output
    wrapped = [Genome((*genome.nodes, Node("neg", (output,)), Node("neg", (output + 1,)))),
               Genome((*genome.nodes, Node("max", (output, output))))]
    variants = [with_dead_node(genome, data), with_swapped_arguments(genome), genome.pruned(), *wrapped]
    for variant in variants:
        assert fingerprint(variant) == reference, (genome, variant)
