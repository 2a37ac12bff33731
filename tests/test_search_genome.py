"""Genomes: random generation, mutation (section 4.3), S-mode, serialization, expressions."""
import random
from collections import Counter

import pytest
import torch

from evonorm_core.search import (
    INITIAL_NODES,
    Genome,
    GraphLayer,
    Node,
    check_mode,
    fingerprint,
    mutate,
    parse,
    random_genome,
    to_infix,
    to_latex,
)


def test_random_genomes_are_valid_and_respect_s_mode():
    rng = random.Random(0)
    for _ in range(200):
        genome = random_genome(rng, "S", num_nodes=10)
        assert len(genome.nodes) == 10
        check_mode(genome, "S")
        for k, node in enumerate(genome.nodes):
            assert all(0 <= i < len(INITIAL_NODES) + k for i in node.inputs)


def test_random_genomes_draw_inputs_uniformly_from_every_earlier_node():
    """Section 3.1: each new node draws its inputs uniformly from all earlier nodes, the intermediate
    ones included (from the 4 initial nodes only, no graph would be deeper than one op)."""
    rng = random.Random(5)
    counts = Counter()
    for _ in range(3000):
        counts.update(random_genome(rng, "B", num_nodes=10).nodes[-1].inputs)
    earlier = len(INITIAL_NODES) + 9  # the last node (index 13) reads nodes 0..12
    assert set(counts) == set(range(earlier))
    expected = sum(counts.values()) / earlier
    assert all(abs(n - expected) < 0.2 * expected for n in counts.values()), counts


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


def doubling_genome(levels: int) -> Genome:
    """tanh(x), then ``levels`` nodes each adding the previous node to itself: fully inlined,
    the formula would have 2**levels copies of tanh(x)."""
    return Genome((Node("tanh", (0,)), *(Node("add", (4 + k, 4 + k)) for k in range(levels))))


def test_shared_subexpressions_print_once():
    genome = doubling_genome(18)  # inlined: 2**18 copies of tanh(x), quick to notice
    assert len(to_infix(genome)) < 40 * 18 and len(to_latex(genome)) < 80 * 18


def test_shared_subexpressions_print_once_and_parse_back():
    genome = doubling_genome(400)
    text = to_infix(genome)
    assert len(text) < 40 * 400  # linear in the genome, not 2**400
    assert text.count("tanh(x)") <= 4 and "t1 = " in text
    assert parse(text) == genome
    latex = to_latex(genome)
    assert len(latex) < 80 * 400 and r"\text{where }" in latex and latex.count(r"\tanh(x)") <= 4


def test_a_long_shared_subexpression_becomes_a_definition():
    genome = parse("t1 = x * sigmoid(v1 * x) / group_std(x); t1 + batch_mean(t1)")
    assert [n.op for n in genome.nodes] == ["mul", "sigmoid", "mul", "group_std", "div", "batch_mean", "add"]
    assert to_infix(genome) == "t1 = x * sigmoid(v1 * x) / group_std(x); t1 + batch_mean(t1)"
    assert to_latex(genome).endswith(r"\quad \text{where } t_{1} = \frac{x \sigma(v_1 x)}{\sqrt{s^2_{w,h,c/g}(x)}}")
    # the same function written out in full is the same genome and prints the same way
    assert parse("x * sigmoid(v1 * x) / group_std(x) + batch_mean(x * sigmoid(v1 * x) / group_std(x))") == genome
    # a short one stays inline
    assert to_infix(parse("tanh(x) * tanh(x)")) == "tanh(x) * tanh(x)"


def test_duplicate_nodes_print_as_the_parser_merges_them():
    # nodes 4 and 5 both compute x * sigmoid(v1 * x)-like subtrees: printed like one shared node
    nodes = (Node("mul", (3, 0)), Node("sigmoid", (4,)), Node("mul", (0, 5)), Node("sigmoid", (4,)),
             Node("mul", (0, 7)), Node("group_std", (6,)), Node("div", (8, 9)), Node("add", (10, 6)))
    genome = Genome(nodes)
    text = to_infix(genome)
    again = parse(text)
    assert to_infix(again) == text and len(again.nodes) < len(genome.nodes)
    assert fingerprint(again) == fingerprint(genome)


def test_deep_nesting_parses_and_prints_without_recursion():
    depth = 5000  # far beyond Python's recursion limit
    genome = parse("tanh(" * depth + "x" + ")" * depth)
    assert len(genome.nodes) == depth
    assert parse(to_infix(genome)) == genome
    negated = parse("-(" * depth + "x" + ")" * depth)
    assert len(negated.nodes) == depth and {n.op for n in negated.nodes} == {"neg"}
    assert parse("(" * depth + "tanh(x)" + ")" * depth) == parse("tanh(x)")


@pytest.mark.parametrize("text, expected", [
    ("-x * v1", "mul(neg(x), v1)"), ("x * -v1 + v0", "add(mul(x, neg(v1)), v0)"),
    ("x - v1 - v0", "add(add(x, neg(v1)), neg(v0))"), ("x / v1 * v0", "mul(div(x, v1), v0)"),
    ("x - -v1", "add(x, neg(neg(v1)))"), ("max(x + v0, -(v1 * x))", "max(add(x, v0), neg(mul(v1, x)))"),
])
def test_precedence_and_associativity(text, expected):
    genome = parse(text)

    def show(index):
        if index < len(INITIAL_NODES):
            return INITIAL_NODES[index]
        node = genome.node(index)
        return f"{node.op}({', '.join(show(i) for i in node.inputs)})"

    assert show(genome.output) == expected


@pytest.mark.parametrize("text, message", [
    ("sigmoid x", "expected '\\(' after sigmoid"), ("max(x,)", "unexpected '\\)'"), ("(x", "expected '\\)'"),
    ("x)", "without a matching"), ("t1 = tanh(x); x * v1", "never uses"), ("x = tanh(x); x", "cannot define 'x'"),
    ("t1 = ; t1", "expected a definition"), ("t1 tanh(x); t1", "expected a definition"), ("x = 0", "unexpected '='"),
    ("max((x, x))", "outside a function"), ("t2", "unknown name 't2'"),
])
def test_more_parse_errors_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


@pytest.mark.parametrize("expression, aggregates", [
    ("x / max(batch_std(x), v1 * x + instance_std(x))", True),  # EvoNorm-B0
    ("tanh(x + batch_mean(-x))", True),  # a statistic of x, even inside an activation
    ("x / group_rms(max(batch_mean(square(v1)), x))", True),  # the outer statistic reads x
    ("tanh(x)", False),
    ("tanh(x + log(square(v1)))", False),  # a constant shift: no aggregation at all
    ("tanh(x + channel_rms(group_rms(v0)))", False),  # statistics of parameters only: a constant
    ("max(x, x)", False),
])
def test_aggregates_input_tells_statistics_of_x_from_pointwise_layers(expression, aggregates):
    assert parse(expression).aggregates_input() is aggregates


def test_mutate_without_a_mode_mutates_in_the_b_search_space():
    """The default search is the B series (every op of Table 1): a mutation given no mode must reach the batch
    statistics, as ``mode="B"`` does, and never keep the node's op."""
    rng = random.Random(3)
    ops = {mutate(parse("tanh(x)"), rng).nodes[0].op for _ in range(300)}
    assert {"batch_mean", "batch_std", "batch_rms"} <= ops and "tanh" not in ops


def test_random_genome_of_one_node_and_the_error_below_one():
    """A graph needs at least its output node: ``num_nodes=1`` is the smallest valid genome (one op on the
    initial nodes 0..3), 0 and negative counts are refused with the count in the message."""
    rng = random.Random(6)
    for _ in range(50):
        genome = random_genome(rng, "B", num_nodes=1)
        assert len(genome.nodes) == 1 and genome.output == len(INITIAL_NODES)
        assert all(0 <= i < len(INITIAL_NODES) for i in genome.nodes[0].inputs)
    for count in (0, -3):
        with pytest.raises(ValueError, match=rf"^num_nodes must be >= 1, got {count}$"):
            random_genome(rng, "B", num_nodes=count)


def test_invalid_genome_messages_name_the_node_and_the_nodes_it_may_read():
    """The whole message, counted by hand: the first intermediate node is node 4 (after x, 0, v0, v1) and may
    read nodes 0..3; the third is node 6 and may read 0..5."""
    with pytest.raises(ValueError, match=r"^a genome needs at least one intermediate node \(the output\)$"):
        Genome(())
    with pytest.raises(ValueError, match=r"^node 4: inputs \(4,\) must be earlier nodes \(0\.\.3\)$"):
        Genome((Node("neg", (4,)),))
    with pytest.raises(ValueError, match=r"^node 6: inputs \(2, 7\) must be earlier nodes \(0\.\.5\)$"):
        Genome((Node("neg", (0,)), Node("tanh", (4,)), Node("add", (2, 7))))
    with pytest.raises(ValueError, match=r"^node 5: op 'add' takes 2 inputs, got \(0,\)$"):
        Genome((Node("neg", (0,)), Node("add", (0,))))
