"""Property-based tests of the expression printer and parser (``evonorm_core.search.expression``).

Two references, neither of them the printer or parser under test:

* a genome evaluated node by node (``property_strategies.evaluate_nodes``): printing a random
  genome and parsing the text back must give a genome that computes the same values bit for bit
  (same ops on the same operands, whatever the nesting of products, quotients, sums, unary minus
  and the constant 0), and printing is then a fixed point;
* an expression tree drawn here and evaluated recursively: its text, written with the usual
  conventions (left-associative ``+ - * /``, unary minus binding tightest, parentheses only where
  they are needed, plus random redundant ones and spacing), must parse to a genome with the
  tree's values.
"""
from __future__ import annotations

import random

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evonorm_core.search import Genome, Node, fingerprint, parse, random_genome, to_infix
from evonorm_core.search.primitives import PRIMITIVES

from .property_strategies import N_INITIAL, ReferenceContext, genomes, output_of, same_values

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHAPE = (3, 4, 2, 3)  # 4 channels in 2 groups


def probe(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=generator, dtype=torch.float64) * 2 + 0.3
    v0, v1 = torch.randn(2, SHAPE[1], generator=generator, dtype=torch.float64)
    return x, v0, v1


def live_count(genome: Genome) -> int:
    return sum(1 for i in genome.live_nodes() if i >= N_INITIAL)


# ---- print, then parse ----------------------------------------------------------------------

@SETTINGS
@given(genome=genomes(max_nodes=9, arithmetic_weight=0.7), seed=st.integers(0, 2**16))
@example(genome=parse("x / (v1 / (x * v0)) / -(x - -v1)"), seed=0)
@example(genome=Genome((Node("neg", (0,)), Node("neg", (4,)), Node("mul", (5, 4)), Node("div", (6, 6)))), seed=1)
@example(genome=Genome((Node("div", (0, 1)), Node("neg", (1,)), Node("add", (4, 5)), Node("mul", (6, 6)))), seed=2)
def test_print_then_parse_computes_the_same_values(genome, seed):
    """Random genomes, mostly nested ``+ - * /`` with unary minus and the constant 0 (shared
    subexpressions become definitions): ``parse(to_infix(g))`` has g's output, bit for bit, on
    random x, v0, v1 with batch statistics; printing it again gives the same text; the parsed
    genome has no more nodes than g's live ones (identical subexpressions merged)."""
    text = to_infix(genome)
    again = parse(text)
    x, v0, v1 = probe(seed)
    assert same_values(output_of(again, x, v0, v1), output_of(genome, x, v0, v1)), (text, genome)
    assert to_infix(again) == text
    assert len(again.nodes) <= live_count(genome)
    assert parse(text, max_nodes=len(again.nodes)) == again


@settings(max_examples=60, deadline=None)
@given(genome=genomes(max_nodes=6, arithmetic_weight=0.3))
def test_print_then_parse_keeps_the_fingerprint(genome):
    """The library's own evaluation (``GraphLayer``, train and eval with moving averages) agrees:
    the parsed genome has the printed one's equivalence fingerprint."""
    assert fingerprint(parse(to_infix(genome))) == fingerprint(genome)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from("BS"))
def test_the_searchs_own_random_graphs_round_trip(seed, mode):
    """The graphs the search actually draws (``random_genome``, 10 nodes, uniform inputs)."""
    genome = random_genome(random.Random(seed), mode)
    again = parse(to_infix(genome))
    x, v0, v1 = probe(seed % 1000)
    assert same_values(output_of(again, x, v0, v1), output_of(genome, x, v0, v1))


# ---- text written by hand, parsed -------------------------------------------------------------

# Binding strength of a tree's outermost operation, as in ordinary notation.
SUM, PRODUCT, UNARY, ATOM = 1, 2, 3, 4
UNARY_FUNCTIONS = sorted(name for name, op in PRIMITIVES.items() if op.arity == 1 and name != "neg")


def leaves():
    return st.sampled_from(["x", "v0", "v1", "0", "0.0", "00", "0."])


def trees():
    """Expression trees as tuples: a leaf name, ``("neg", a)``, ``(op, a, b)`` with op in
    ``+ - * /``, ``("call", f, a)`` for a unary op of Table 1 or ``("max", a, b)``."""
    def extend(children):
        return st.one_of(
            st.tuples(st.just("neg"), children),
            st.tuples(st.sampled_from(["+", "-", "*", "/"]), children, children),
            st.tuples(st.just("call"), st.sampled_from(UNARY_FUNCTIONS), children),
            st.tuples(st.just("max"), children, children),
        )
    return st.recursive(leaves(), extend, max_leaves=14)


def strength(tree) -> int:
    if isinstance(tree, str) or tree[0] in ("call", "max"):
        return ATOM
    return {"neg": UNARY, "+": SUM, "-": SUM, "*": PRODUCT, "/": PRODUCT}[tree[0]]


def write(tree, draw) -> str:
    """The tree in ordinary notation: parentheses where the reading would change without them,
    and, at random, redundant ones and extra spaces."""
    def wrap(child, needed: bool) -> str:
        text = write(child, draw)
        return f"({text})" if needed or draw(st.integers(0, 5)) == 0 else text

    space = " " * draw(st.integers(0, 2))
    if isinstance(tree, str):
        return tree
    if tree[0] == "neg":
        return "-" + wrap(tree[1], strength(tree[1]) < UNARY)
    if tree[0] == "call":
        return f"{tree[1]}({space}{write(tree[2], draw)})"
    if tree[0] == "max":
        return f"max({write(tree[1], draw)},{space}{write(tree[2], draw)})"
    level = strength(tree)
    # left-associative: the right operand of a sum (product) needs parentheses if it is one too
    left = wrap(tree[1], strength(tree[1]) < level)
    right = wrap(tree[2], strength(tree[2]) <= level)
    return f"{left}{space}{tree[0]}{space}{right}"


def value_of(tree, x, v0, v1, context):
    """The tree's value, evaluated recursively with Table 1's ops (``a - b`` is ``a + neg(b)``)."""
    if isinstance(tree, str):
        named = {"x": x, "v0": v0.view(1, -1, 1, 1).expand_as(x), "v1": v1.view(1, -1, 1, 1).expand_as(x)}
        return named.get(tree, torch.zeros_like(x))
    if tree[0] == "call":
        return PRIMITIVES[tree[1]].function(value_of(tree[2], x, v0, v1, context), context).expand_as(x)
    args = [value_of(child, x, v0, v1, context) for child in tree[1:]]
    if tree[0] == "-":
        args[1] = -args[1]
    op = {"neg": "neg", "+": "add", "-": "add", "*": "mul", "/": "div", "max": "max"}[tree[0]]
    return PRIMITIVES[op].function(*args, context).expand_as(x)


@SETTINGS
@given(tree=trees().filter(lambda t: not isinstance(t, str)), data=st.data(), seed=st.integers(0, 2**16))
def test_text_in_ordinary_notation_parses_to_its_value(tree, data, seed):
    """``a - b - c`` is ``(a - b) - c``, ``a / b / c`` is ``(a / b) / c``, ``a / (b * c)`` keeps its
    parentheses, ``-a * b`` is ``(-a) * b``, and so on: the parsed genome's output equals the tree's
    value bit for bit; printed and parsed again, it still does."""
    text = write(tree, data.draw)
    x, v0, v1 = probe(seed)
    expected = value_of(tree, x, v0, v1, ReferenceContext(eps=1e-5, groups=2))
    genome = parse(text)
    assert same_values(output_of(genome, x, v0, v1), expected), text
    assert same_values(output_of(parse(to_infix(genome)), x, v0, v1), expected), (text, to_infix(genome))
