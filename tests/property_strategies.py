"""Hypothesis strategies and brute-force references shared by ``tests/test_properties_*.py``.

:func:`genomes` draws random search graphs (any op of Table 1, or mostly the arithmetic the
printer has to parenthesise); :func:`evaluate_nodes` evaluates *every* node of a genome, dead
ones included, in float64, with an optional set of nodes replaced by NaN. It is the brute-force
reference for the genome's graph properties: a node is live exactly when poisoning it with NaN
turns the whole output into NaN (every op of Table 1 propagates NaN to every element it
produces), and a node depends on ``x`` exactly when poisoning ``x`` turns it into NaN. It shares
only the element-wise and per-sample ops of Table 1 with the library (``PRIMITIVES``, tested
against float64 formulas in ``test_search_primitives.py``); the graph walk, the liveness and
the batch statistics are its own.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from evonorm_core.search import INITIAL_NODES, PRIMITIVES, Genome, Node, ops_for_mode

ARITHMETIC = ("add", "mul", "div", "neg")
N_INITIAL = len(INITIAL_NODES)


@st.composite
def genomes(draw, mode: str = "B", min_nodes: int = 1, max_nodes: int = 8, arithmetic_weight: float = 0.5) -> Genome:
    """A random genome: each node draws an op (with probability ``arithmetic_weight`` one of
    ``+ * / neg``, else any op of the mode) and its inputs (half the time one of the two nodes
    just before it, so that graphs nest deeply; else any earlier node)."""
    ops = ops_for_mode(mode)
    count = draw(st.integers(min_nodes, max_nodes))
    nodes = []
    for k in range(count):
        index = N_INITIAL + k
        arithmetic = draw(st.floats(0, 1)) < arithmetic_weight
        op = draw(st.sampled_from(ARITHMETIC if arithmetic else ops))
        inputs = []
        for _ in range(PRIMITIVES[op].arity):
            if draw(st.booleans()):
                inputs.append(draw(st.integers(max(0, index - 2), index - 1)))
            else:
                inputs.append(draw(st.integers(0, index - 1)))
        nodes.append(Node(op, tuple(inputs)))
    return Genome(tuple(nodes))


class ReferenceContext:
    """Table 1's op context, computed here: batch statistics of the value itself in training
    (``mean``, biased ``var``, ``mean_square`` = mu(x^2)), or given per-channel values in eval."""

    def __init__(self, eps: float, groups: int, running: dict[str, torch.Tensor] | None = None) -> None:
        self.eps, self.groups, self.running = eps, groups, running

    def batch_statistic(self, kind: str, value: torch.Tensor) -> torch.Tensor:
        if self.running is not None:
            return self.running[kind].view(1, -1, 1, 1)
        dims = (0, 2, 3)
        stat = {
            "mean": lambda v: v.mean(dim=dims),
            "var": lambda v: (v - v.mean(dim=dims, keepdim=True)).square().mean(dim=dims),
            "mean_square": lambda v: v.square().mean(dim=dims),
        }[kind](value)
        return stat.view(1, -1, 1, 1)


def evaluate_nodes(
    genome: Genome,
    x: torch.Tensor,
    v0: torch.Tensor,
    v1: torch.Tensor,
    *,
    groups: int = 2,
    eps: float = 1e-5,
    poison: frozenset[int] | set[int] = frozenset(),
    running: dict[int, dict[str, torch.Tensor]] | None = None,
) -> dict[int, torch.Tensor]:
    """Every node's value (initial nodes included, all of ``x``'s shape), in node order.

    ``poison``: node indices whose value is replaced by NaN before anything reads it.
    ``running``: per batch-aggregation node, the per-channel values its batch statistic
    reads (eval mode); ``None``: the statistics of the current batch (training mode).
    """
    full = [x, torch.zeros_like(x), v0.view(1, -1, 1, 1).expand_as(x), v1.view(1, -1, 1, 1).expand_as(x)]
    values = {i: (torch.full_like(x, float("nan")) if i in poison else value) for i, value in enumerate(full)}
    for k, node in enumerate(genome.nodes):
        index = N_INITIAL + k
        if index in poison:
            values[index] = torch.full_like(x, float("nan"))
            continue
        op = PRIMITIVES[node.op]
        context = ReferenceContext(eps, groups, None if running is None else running.get(index))
        values[index] = op.function(*(values[i] for i in node.inputs), context).expand_as(x)
    return values


def output_of(genome: Genome, *args, **kwargs) -> torch.Tensor:
    return evaluate_nodes(genome, *args, **kwargs)[genome.output]


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal, NaN equal to NaN (and the sign of zero ignored)."""
    return bool(torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))


def brute_force_live(genome: Genome, x: torch.Tensor, v0: torch.Tensor, v1: torch.Tensor, groups: int = 2) -> set[int] | None:
    """The nodes whose NaN poisoning turns the whole output into NaN (None: the output is all
    NaN without poisoning, so the test cannot tell)."""
    if torch.isnan(output_of(genome, x, v0, v1, groups=groups)).all():
        return None
    return {i for i in range(genome.output + 1)
            if torch.isnan(output_of(genome, x, v0, v1, groups=groups, poison={i})).all()}


def brute_force_reads_x(genome: Genome, x: torch.Tensor, v0: torch.Tensor, v1: torch.Tensor, groups: int = 2) -> set[int]:
    """The nodes that are all NaN when ``x`` is NaN (those computed from ``x``)."""
    values = evaluate_nodes(genome, x, v0, v1, groups=groups, poison={0})
    return {i for i, value in values.items() if torch.isnan(value).all()}
