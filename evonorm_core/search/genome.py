"""The computation graph a candidate layer is (paper section 3.1), its random generation
and its mutation (section 4.3).

A :class:`Genome` is a list of intermediate nodes after the 4 initial nodes ``x`` (the
input), ``0`` (a constant zero tensor), ``v0`` and ``v1`` (trainable per-channel vectors
initialised to 0 and 1). Node ``i`` (counting the initial ones) applies a Table 1 op to
earlier nodes; the last node is the output; nodes nothing reads are allowed (dead) and may
be picked up by later mutations.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

from .primitives import PRIMITIVES, ops_for_mode

INITIAL_NODES = ("x", "0", "v0", "v1")
INPUT, ZERO, V0, V1 = range(len(INITIAL_NODES))
DEFAULT_MAX_NODES = 10  # intermediate nodes: 4 + 10 = 14 in all, as in the paper


@dataclass(frozen=True)
class Node:
    """An intermediate node: ``op`` (a name in :data:`PRIMITIVES`) applied to ``inputs``
    (indices of earlier nodes, initial nodes included)."""

    op: str
    inputs: tuple[int, ...]


@dataclass(frozen=True)
class Genome:
    """A candidate layer's graph; ``nodes[k]`` is node ``len(INITIAL_NODES) + k``."""

    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a genome needs at least one intermediate node (the output)")
        for k, node in enumerate(self.nodes):
            index = len(INITIAL_NODES) + k
            if node.op not in PRIMITIVES:
                raise ValueError(f"node {index}: unknown op {node.op!r}; accepted: {sorted(PRIMITIVES)}")
            if len(node.inputs) != PRIMITIVES[node.op].arity:
                raise ValueError(
                    f"node {index}: op {node.op!r} takes {PRIMITIVES[node.op].arity} inputs, got {node.inputs}"
                )
            if any(not 0 <= i < index for i in node.inputs):
                raise ValueError(f"node {index}: inputs {node.inputs} must be earlier nodes (0..{index - 1})")

    @property
    def output(self) -> int:
        return len(INITIAL_NODES) + len(self.nodes) - 1

    def node(self, index: int) -> Node:
        return self.nodes[index - len(INITIAL_NODES)]

    def live_nodes(self) -> list[int]:
        """Indices of the nodes the output depends on (initial ones included), ascending."""
        live, stack = set(), [self.output]
        while stack:
            index = stack.pop()
            if index in live:
                continue
            live.add(index)
            if index >= len(INITIAL_NODES):
                stack.extend(self.node(index).inputs)
        return sorted(live)

    def live_ops(self) -> list[str]:
        return [self.node(i).op for i in self.live_nodes() if i >= len(INITIAL_NODES)]

    def uses_batch_statistics(self) -> bool:
        return any(PRIMITIVES[op].uses_batch_statistics for op in self.live_ops())

    def aggregates_input(self) -> bool:
        """Whether a live aggregation op (a statistic) reads ``x``: without one the layer is a
        pointwise function of ``x`` (an activation), whatever constants it computes."""
        reads_x = {INITIAL_NODES.index("x")}
        for index in self.live_nodes():
            if index >= len(INITIAL_NODES) and reads_x.intersection(self.node(index).inputs):
                if PRIMITIVES[self.node(index).op].aggregation:
                    return True
                reads_x.add(index)
        return False

    def pruned(self) -> "Genome":
        """The same function with the dead nodes removed and the live ones renumbered."""
        live = [i for i in self.live_nodes() if i >= len(INITIAL_NODES)]
        new_index = {i: i for i in range(len(INITIAL_NODES))}
        new_index.update({old: len(INITIAL_NODES) + k for k, old in enumerate(live)})
        return Genome(tuple(Node(self.node(i).op, tuple(new_index[j] for j in self.node(i).inputs)) for i in live))

    def to_dict(self) -> dict:
        return {"nodes": [[node.op, *node.inputs] for node in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict) -> "Genome":
        try:
            return cls(tuple(Node(entry[0], tuple(int(i) for i in entry[1:])) for entry in data["nodes"]))
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"not a serialized genome (expected {{'nodes': [[op, input, ...], ...]}}): {data!r}") from error

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Genome":
        return cls.from_dict(json.loads(text))


def random_genome(rng: random.Random, mode: str = "B", num_nodes: int = DEFAULT_MAX_NODES) -> Genome:
    """A random graph built sequentially (section 3.1): each new node draws an op uniformly
    from the ``mode``'s ops, then its inputs uniformly from all earlier nodes."""
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    ops = ops_for_mode(mode)
    nodes: list[Node] = []
    for k in range(num_nodes):
        op = rng.choice(ops)
        nodes.append(Node(op, _random_inputs(rng, op, len(INITIAL_NODES) + k)))
    return Genome(tuple(nodes))


def _random_inputs(rng: random.Random, op: str, index: int) -> tuple[int, ...]:
    return tuple(rng.randrange(index) for _ in range(PRIMITIVES[op].arity))


def mutate(genome: Genome, rng: random.Random, mode: str = "B") -> Genome:
    """Section 4.3's mutation: (1) pick an intermediate node uniformly, (2) replace its op
    by a different one drawn uniformly from the ``mode``'s ops, (3) draw its predecessors
    uniformly from the nodes before it."""
    k = rng.randrange(len(genome.nodes))
    ops = [op for op in ops_for_mode(mode) if op != genome.nodes[k].op]
    op = rng.choice(ops)
    nodes = list(genome.nodes)
    nodes[k] = Node(op, _random_inputs(rng, op, len(INITIAL_NODES) + k))
    return Genome(tuple(nodes))


def check_mode(genome: Genome, mode: str) -> None:
    """Raise ``ValueError`` if ``genome`` uses an op the search ``mode`` excludes (any node, dead ones included)."""
    allowed = set(ops_for_mode(mode))
    bad = sorted({node.op for node in genome.nodes} - allowed)
    if bad:
        raise ValueError(f"ops {bad} are not allowed in mode {mode!r} (batch-dependent ops are excluded in mode 'S')")
