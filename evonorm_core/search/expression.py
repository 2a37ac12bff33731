"""Genomes as readable expressions, and back.

:func:`to_infix` prints the live part of a genome as a formula that :func:`parse`
reads (``"x * sigmoid(v1 * x) / group_std(x)"`` is EvoNorm-S0); :func:`to_latex` prints
it in the paper's notation. Names: ``x``, ``0``, ``v0``, ``v1``; ``+ - * /`` (``a - b`` is
``a + neg(b)``, ``/`` is Table 1's safe division); every op of
:data:`~.primitives.PRIMITIVES` as a function, e.g. ``max(a, b)``, ``sigmoid(a)``,
``instance_std(a)``, ``batch_rms(a)`` (root second moment).
"""
from __future__ import annotations

import re

from .genome import INITIAL_NODES, Genome, Node
from .primitives import PRIMITIVES

_ATOM, _UNARY, _PRODUCT, _SUM = 4, 3, 2, 1  # binding strength of what a string is


def _render(genome: Genome, index: int, latex: bool) -> tuple[str, int]:
    """``(text, strength)`` of node ``index``; strength says where it needs parentheses."""
    if index < len(INITIAL_NODES):
        name = INITIAL_NODES[index]
        return (f"{name[0]}_{name[1]}" if latex and name.startswith("v") else name), _ATOM
    node = genome.node(index)
    args = [_render(genome, i, latex) for i in node.inputs]

    def wrap(arg: tuple[str, int], min_strength: int) -> str:
        text, strength = arg
        if strength >= min_strength:
            return text
        return rf"\left({text}\right)" if latex else f"({text})"

    if node.op == "add":
        right = node.inputs[1]
        if right >= len(INITIAL_NODES) and genome.node(right).op == "neg":
            negated = _render(genome, genome.node(right).inputs[0], latex)
            return f"{wrap(args[0], _SUM)} - {wrap(negated, _PRODUCT)}", _SUM
        return f"{wrap(args[0], _SUM)} + {wrap(args[1], _PRODUCT)}", _SUM
    if node.op in ("mul", "div") and not (latex and node.op == "div"):
        sep = " " if latex else f" {'*' if node.op == 'mul' else '/'} "
        return f"{wrap(args[0], _PRODUCT)}{sep}{wrap(args[1], _UNARY)}", _PRODUCT
    if node.op == "neg":
        return f"-{wrap(args[0], _ATOM)}", _UNARY
    template = PRIMITIVES[node.op].latex if latex else PRIMITIVES[node.op].infix
    return template.format(*(text for text, _ in args)), _ATOM


def to_infix(genome: Genome) -> str:
    """The genome's function as a formula :func:`parse` reads back (dead nodes omitted;
    a node read twice is written twice)."""
    return _render(genome, genome.output, latex=False)[0]


def to_latex(genome: Genome) -> str:
    """The genome's function in the paper's notation (without the trailing ``gamma``/``beta``)."""
    return _render(genome, genome.output, latex=True)[0]


_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d*)?)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<symbol>[-+*/(),]))")
_VARIABLES = {name: i for i, name in enumerate(INITIAL_NODES) if name != "0"}


class _Parser:
    """Recursive descent over ``sum := product (('+'|'-') product)*``,
    ``product := unary (('*'|'/') unary)*``, ``unary := '-' unary | atom``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokenize(text)
        self.position = 0
        self.nodes: list[Node] = []
        self.index_of: dict[Node, int] = {}

    def _tokenize(self, text: str) -> list[tuple[str, str, int]]:
        tokens, at = [], 0
        while text[at:].strip():
            match = _TOKEN.match(text, at)
            if not match:
                raise self.error(f"unexpected character {text[at:].lstrip()[0]!r}", len(text) - len(text[at:].lstrip()))
            kind = match.lastgroup
            tokens.append((kind, match.group(kind), match.start(kind)))
            at = match.end()
        return tokens

    def error(self, message: str, at: int | None = None) -> ValueError:
        if at is None:
            at = self.tokens[self.position][2] if self.position < len(self.tokens) else len(self.text)
        return ValueError(f"cannot parse layer expression {self.text!r} at column {at}: {message}")

    def peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        if self.position >= len(self.tokens):
            raise self.error(f"expected {expected!r}, the expression ended" if expected else "unexpected end")
        token = self.tokens[self.position]
        if expected is not None and token[1] != expected:
            raise self.error(f"expected {expected!r}, got {token[1]!r}")
        self.position += 1
        return token

    def add(self, op: str, *inputs: int) -> int:
        node = Node(op, inputs)
        if node not in self.index_of:  # identical subexpressions share one node
            self.index_of[node] = len(INITIAL_NODES) + len(self.nodes)
            self.nodes.append(node)
        return self.index_of[node]

    def parse_sum(self) -> int:
        left = self.parse_product()
        while self.peek() in ("+", "-"):
            symbol = self.take()[1]
            right = self.parse_product()
            left = self.add("add", left, right if symbol == "+" else self.add("neg", right))
        return left

    def parse_product(self) -> int:
        left = self.parse_unary()
        while self.peek() in ("*", "/"):
            op = "mul" if self.take()[1] == "*" else "div"
            left = self.add(op, left, self.parse_unary())
        return left

    def parse_unary(self) -> int:
        if self.peek() == "-":
            self.take()
            return self.add("neg", self.parse_unary())
        return self.parse_atom()

    def parse_atom(self) -> int:
        kind, value, at = self.take()
        if value == "(":
            inner = self.parse_sum()
            self.take(")")
            return inner
        if kind == "number":
            if float(value) != 0:
                raise self.error(f"the only constant of the search space is 0, got {value}", at)
            return INITIAL_NODES.index("0")
        if kind != "name":
            raise self.error(f"unexpected {value!r}", at)
        if value in _VARIABLES:
            return _VARIABLES[value]
        if value not in PRIMITIVES:
            accepted = sorted([*_VARIABLES, *PRIMITIVES])
            raise self.error(f"unknown name {value!r}; accepted: {accepted}", at)
        self.take("(")
        args = [self.parse_sum()]
        while self.peek() == ",":
            self.take()
            args.append(self.parse_sum())
        self.take(")")
        if len(args) != PRIMITIVES[value].arity:
            raise self.error(f"{value} takes {PRIMITIVES[value].arity} argument(s), got {len(args)}", at)
        return self.add(value, *args)


def parse(text: str, max_nodes: int | None = None) -> Genome:
    """The genome of a formula such as ``"x * sigmoid(v1 * x) / group_std(x)"``.

    Identical subexpressions become one node. ``max_nodes`` bounds the number of
    intermediate nodes (``None``: no bound); a formula that is a bare variable, or has a
    syntax error, an unknown name or too many nodes, raises ``ValueError`` saying why.
    """
    parser = _Parser(text)
    if not parser.tokens:
        raise ValueError("empty layer expression")
    parser.parse_sum()
    if parser.position != len(parser.tokens):
        raise parser.error(f"unexpected {parser.peek()!r} after a complete expression")
    if not parser.nodes:
        raise ValueError(f"layer expression {text!r} applies no op; a layer needs at least one")
    if max_nodes is not None and len(parser.nodes) > max_nodes:
        raise ValueError(f"layer expression {text!r} needs {len(parser.nodes)} nodes, more than max_nodes={max_nodes}")
    return Genome(tuple(parser.nodes))
