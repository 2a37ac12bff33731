"""Genomes: random generation, mutation (section 4.3), S-mode, serialization, expressions."""
import random

import pytest
import torch

from evonorm_core.search import (
    INITIAL_NODES, Genome, GraphLayer, Node, check_mode, fingerprint, mutate, parse, random_genome,
    to_infix, to_latex,
)


def test_random_genomes_are_valid_and_respect_s_mode():
    rng = random.Random(0)
    for _ in range(200):
        genome = random_genome(rng, "S", num_nodes=10)
        assert len(genome.nodes) == 10
        check_mode(genome, "S")
        for k, node in enumerate(genome.nodes):
            assert all(0 <= i < len(INITIAL_NODES) + k for i in node.inputs)


def test_mutation_changes_one_node_keeps_validity_and_mode():
    rng = random.Random(1)
    genome = random_genome(rng, "S")
    for _ in range(300):
        child = mutate(genome, rng, "S")
        changed = [k for k, (a, b) in enumerate(zip(genome.nodes, child.nodes)) if a != b]
        assert len(changed) == 1 and child.nodes[changed[0]].op != genome.nodes[changed[0]].op
        check_mode(child, "S")
        genome = child


def test_b_mode_mutation_reaches_batch_ops():
    rng = random.Random(2)
    ops = {mutate(parse("tanh(x)"), rng, "B").nodes[0].op for _ in range(300)}
    assert {"batch_mean", "batch_std", "batch_rms"} <= ops and "tanh" not in ops


def test_check_mode_rejects_batch_ops_in_s_mode():
    with pytest.raises(ValueError, match="batch_std"):
        check_mode(parse("x / batch_std(x)"), "S")


def test_invalid_genomes_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown op 'foo'"):
        Genome((Node("foo", (0,)),))
    with pytest.raises(ValueError, match="earlier nodes"):
        Genome((Node("neg", (4,)),))
    with pytest.raises(ValueError, match="takes 2 inputs"):
        Genome((Node("add", (0,)),))


def test_json_round_trip():
    genome = random_genome(random.Random(4))
    assert Genome.from_json(genome.to_json()) == genome
    with pytest.raises(ValueError, match="not a serialized genome"):
        Genome.from_dict({"nodes": 3})


def test_pruning_drops_dead_nodes_and_keeps_the_function():
    genome = Genome((Node("exp", (0,)), Node("tanh", (0,)), Node("mul", (0, 5))))  # node 4 (exp) is dead
    pruned = genome.pruned()
    assert [n.op for n in pruned.nodes] == ["tanh", "mul"]
    assert fingerprint(pruned) == fingerprint(genome)


@pytest.mark.parametrize("seed", range(40))
def test_expression_round_trip_on_random_genomes(seed):
    genome = random_genome(random.Random(seed), "B", num_nodes=6)
    text = to_infix(genome)
    again = parse(text)
    assert to_infix(again) == text
    assert fingerprint(again) == fingerprint(genome)


def test_paper_layers_print_as_in_the_paper():
    s0 = parse("x * sigmoid(v1 * x) / group_std(x)")
    assert to_latex(s0) == r"\frac{x \sigma(v_1 x)}{\sqrt{s^2_{w,h,c/g}(x)}}"
    b0 = parse("x / max(batch_std(x), v1 * x + instance_std(x))")
    assert to_latex(b0) == r"\frac{x}{\max(\sqrt{s^2_{b,w,h}(x)}, v_1 x + \sqrt{s^2_{w,h}(x)})}"
    assert to_infix(parse("x - (x - v0)")) == "x - (x - v0)"
    assert to_infix(parse("-(-x) * (x + v1)")) == "-(-x) * (x + v1)"


def test_shared_subexpressions_become_one_node():
    genome = parse("sigmoid(x * v1) + sigmoid(x * v1)")
    assert [n.op for n in genome.nodes] == ["mul", "sigmoid", "add"]


@pytest.mark.parametrize("text, message", [
    ("x +", "end"), ("foo(x)", "unknown name 'foo'"), ("max(x)", "takes 2"), ("x 1", "unexpected"),
    ("2 * x", "only constant"), ("x", "applies no op"), ("x $ x", "unexpected character"), ("", "empty"),
])
def test_parse_errors_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_parse_respects_max_nodes():
    with pytest.raises(ValueError, match="max_nodes=2"):
        parse("tanh(sigmoid(exp(x)))", max_nodes=2)


def test_a_parsed_formula_trains():
    layer = GraphLayer(parse("x * sigmoid(v1 * x) / instance_std(x)"), 4)
    out = layer(torch.randn(2, 4, 3, 3))
    out.sum().backward()
    assert layer.v1.grad is not None and torch.isfinite(layer.v1.grad).all()
