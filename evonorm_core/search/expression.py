"""Genomes as readable expressions, and back.

:func:`to_infix` prints the live part of a genome as a formula that :func:`parse`
reads (``"x * sigmoid(v1 * x) / group_std(x)"`` is EvoNorm-S0); :func:`to_latex` prints
it in the paper's notation. Names: ``x``, ``0``, ``v0``, ``v1``; ``+ - * /`` (``a - b`` is
``a + neg(b)``, ``/`` is Table 1's safe division); every op of
:data:`~.primitives.PRIMITIVES` as a function, e.g. ``max(a, b)``, ``sigmoid(a)``,
``instance_std(a)``, ``batch_rms(a)`` (root second moment).

A subexpression the graph reads more than once is printed once, as a definition in front
of the formula (``"t1 = x * sigmoid(v1 * x); t1 / group_std(t1)"``) unless it is short,
so printing is linear in the genome's size; :func:`parse` reads definitions back. Both
run without recursion, so any depth of nesting works.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass

from .genome import INITIAL_NODES, Genome, Node
from .primitives import PRIMITIVES

_ATOM, _UNARY, _PRODUCT, _SUM = 4, 3, 2, 1  # binding strength of what a string is
_FORMATTER = string.Formatter()
INLINE_SHARED_CHARS = 20
"""A subexpression read more than once is printed inline (not as a definition) if it is at most this long."""


# ---- printing ---------------------------------------------------------------------------

@dataclass
class _Fragment:
    """A node's text as pieces: strings and indices of nodes printed inline there."""

    pieces: list[str | int]
    length: int
    strength: int


def _canonical(genome: Genome) -> tuple[list[int], dict[int, int]]:
    """The live intermediate nodes with structurally identical ones merged (what :func:`parse`
    would make of the printed text): ``(order, representative)`` where ``representative``
    maps every live node to the first node computing the same op of the same inputs."""
    representative = {i: i for i in range(len(INITIAL_NODES))}
    seen: dict[Node, int] = {}
    order = []
    for index in genome.live_nodes():
        if index < len(INITIAL_NODES):
            continue
        node = genome.node(index)
        key = Node(node.op, tuple(representative[i] for i in node.inputs))
        if key not in seen:
            seen[key] = index
            order.append(index)
        representative[index] = seen[key]
    return order, representative


def _render(genome: Genome, latex: bool) -> str:
    order, rep = _canonical(genome)
    inputs = {i: [rep[j] for j in genome.node(i).inputs] for i in order}
    uses = dict.fromkeys(order, 0)
    for i in order:
        for j in inputs[i]:
            if j in uses:
                uses[j] += 1
    fragments: dict[int, _Fragment] = {}
    names: dict[int, str] = {}

    def leaf(index: int) -> _Fragment:
        if index in names:
            return _Fragment([names[index]], len(names[index]), _ATOM)
        if index < len(INITIAL_NODES):
            name = INITIAL_NODES[index]
            text = f"{name[0]}_{name[1]}" if latex and name.startswith("v") else name
            return _Fragment([text], len(text), _ATOM)
        return _Fragment([index], fragments[index].length, fragments[index].strength)

    def wrap(frag: _Fragment, min_strength: int) -> _Fragment:
        if frag.strength >= min_strength:
            return frag
        left, right = (r"\left(", r"\right)") if latex else ("(", ")")
        return _Fragment([left, *frag.pieces, right], frag.length + len(left) + len(right), _ATOM)

    def join(parts: list[str | _Fragment], strength: int) -> _Fragment:
        pieces: list[str | int] = []
        length = 0
        for part in parts:
            if isinstance(part, str):
                pieces.append(part)
                length += len(part)
            else:
                pieces += part.pieces
                length += part.length
        return _Fragment(pieces, length, strength)

    for index in order:
        node = genome.node(index)
        args = [leaf(i) for i in inputs[index]]
        right = inputs[index][1] if node.op == "add" else None
        if right is not None and right in fragments and right not in names and genome.node(right).op == "neg":
            # a + neg(b) prints as a - b when neg(b) is not printed on its own
            negated = leaf(rep[genome.node(right).inputs[0]])
            frag = join([wrap(args[0], _SUM), " - ", wrap(negated, _PRODUCT)], _SUM)
        elif node.op == "add":
            frag = join([wrap(args[0], _SUM), " + ", wrap(args[1], _PRODUCT)], _SUM)
        elif node.op in ("mul", "div") and not (latex and node.op == "div"):
            sep = " " if latex else f" {'*' if node.op == 'mul' else '/'} "
            frag = join([wrap(args[0], _PRODUCT), sep, wrap(args[1], _UNARY)], _PRODUCT)
        elif node.op == "neg":
            frag = join(["-", wrap(args[0], _ATOM)], _UNARY)
        else:
            template = PRIMITIVES[node.op].latex if latex else PRIMITIVES[node.op].infix
            parts: list[str | _Fragment] = []
            for literal, field, _, _ in _FORMATTER.parse(template):
                if literal:
                    parts.append(literal)
                if field is not None:
                    parts.append(args[int(field)])
            frag = join(parts, _ATOM)
        fragments[index] = frag
        if uses[index] > 1 and frag.length > INLINE_SHARED_CHARS:
            names[index] = f"t_{{{len(names) + 1}}}" if latex else f"t{len(names) + 1}"

    def flatten(index: int) -> str:
        out: list[str] = []
        stack: list[str | int] = list(reversed(fragments[index].pieces))
        while stack:
            piece = stack.pop()
            if isinstance(piece, str):
                out.append(piece)
            else:
                stack.extend(reversed(fragments[piece].pieces))
        return "".join(out)

    body = flatten(rep[genome.output])  # the output is read by no node, so it is never named
    definitions = [(names[i], flatten(i)) for i in order if i in names]
    if not definitions:
        return body
    if latex:
        return body + r" \quad \text{where } " + r", \; ".join(f"{n} = {t}" for n, t in definitions)
    return "; ".join(f"{n} = {t}" for n, t in definitions) + "; " + body


def to_infix(genome: Genome) -> str:
    """The genome's function as a formula :func:`parse` reads back to an equivalent genome
    (dead nodes omitted; a subexpression read more than once is printed once, as a
    definition ``tK = ...;`` in front, unless it is short)."""
    return _render(genome, latex=False)


def to_latex(genome: Genome) -> str:
    """The genome's function in the paper's notation (without the trailing ``gamma``/``beta``);
    shared subexpressions as ``t_K`` defined after ``\\text{where}``."""
    return _render(genome, latex=True)


# ---- parsing ----------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d*)?)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<symbol>[-+*/(),;=]))")
_VARIABLES = {name: i for i, name in enumerate(INITIAL_NODES) if name != "0"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3}
_BINARY = {"+": "add", "*": "mul", "/": "div"}


class _Parser:
    """An operator-precedence (shunting-yard) parser with an explicit stack, over
    ``sum := product (('+'|'-') product)*``, ``product := unary (('*'|'/') unary)*``,
    ``unary := '-' unary | atom``, ``atom := number | name | op '(' sum (',' sum)* ')' | '(' sum ')'``,
    and statements ``name '=' sum ';'`` in front of the final ``sum``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokenize(text)
        self.nodes: list[Node] = []
        self.index_of: dict[Node, int] = {}
        self.defined: dict[str, int] = {}
        self.used: set[str] = set()

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

    def error(self, message: str, at: int) -> ValueError:
        return ValueError(f"cannot parse layer expression {self.text!r} at column {at}: {message}")

    def add(self, op: str, *inputs: int) -> int:
        node = Node(op, inputs)
        if node not in self.index_of:  # identical subexpressions share one node
            self.index_of[node] = len(INITIAL_NODES) + len(self.nodes)
            self.nodes.append(node)
        return self.index_of[node]

    def parse(self) -> int:
        """Parse every statement; the index of the final expression's node."""
        statements: list[list[tuple[str, str, int]]] = [[]]
        ends: list[int] = []  # the column of the ';' that ends each definition
        for token in self.tokens:
            if token[1] == ";":
                statements.append([])
                ends.append(token[2])
            else:
                statements[-1].append(token)
        for statement, end in zip(statements[:-1], ends):
            if len(statement) < 3 or statement[0][0] != "name" or statement[1][1] != "=":
                raise self.error("expected a definition 'name = expression' before ';'",
                                 statement[0][2] if statement else end)
            name, at = statement[0][1], statement[0][2]
            if name in _VARIABLES or name in PRIMITIVES or name in self.defined:
                raise self.error(f"cannot define {name!r}: it is already a variable, an op or defined", at)
            self.defined[name] = self.expression(statement[2:], end=end)
        root = self.expression(statements[-1], end=len(self.text))
        unused = [name for name in self.defined if name not in self.used]
        if unused:
            raise ValueError(f"layer expression {self.text!r} defines {unused} but never uses it")
        return root

    def expression(self, tokens: list[tuple[str, str, int]], end: int) -> int:
        """The node of one expression (iterative: operands and operators on explicit stacks)."""
        if not tokens:
            raise self.error("expected an expression", end)
        operands: list[int] = []
        # operator stack entries: [kind, symbol/op name, column, argument count]
        operators: list[list] = []

        def reduce_top() -> None:
            kind, symbol, at, _ = operators.pop()
            if kind == "neg":
                operands.append(self.add("neg", operands.pop()))
                return
            right, left = operands.pop(), operands.pop()
            if symbol == "-":
                right = self.add("neg", right)
            operands.append(self.add(_BINARY.get(symbol, "add"), left, right))

        def reduce_while(precedence: int) -> None:
            while operators and operators[-1][0] in ("binary", "neg") and _PRECEDENCE[operators[-1][1]] >= precedence:
                reduce_top()

        def reduce_to_open() -> list:
            while operators and operators[-1][0] in ("binary", "neg"):
                reduce_top()
            return operators[-1] if operators else None

        expect_operand = True
        opens_call = False  # the previous token was an op's name: this one must be its "("
        for kind, value, at in tokens:
            if opens_call:
                if value != "(":
                    raise self.error(f"expected '(' after {operators[-1][1]}", at)
                opens_call = False
                continue
            if expect_operand:
                if value == "-":
                    operators.append(["neg", "neg", at, 0])
                elif value == "(":
                    operators.append(["paren", "(", at, 0])
                elif kind == "number":
                    if float(value) != 0:
                        raise self.error(f"the only constant of the search space is 0, got {value}", at)
                    operands.append(INITIAL_NODES.index("0"))
                    expect_operand = False
                elif kind == "name":
                    if value in _VARIABLES:
                        operands.append(_VARIABLES[value])
                        expect_operand = False
                    elif value in self.defined:
                        operands.append(self.defined[value])
                        self.used.add(value)
                        expect_operand = False
                    elif value in PRIMITIVES:
                        operators.append(["call", value, at, 1])
                        opens_call = True
                    else:
                        accepted = sorted([*_VARIABLES, *PRIMITIVES, *self.defined])
                        raise self.error(f"unknown name {value!r}; accepted: {accepted}", at)
                else:
                    raise self.error(f"unexpected {value!r}", at)
                continue
            if value in _PRECEDENCE and value != "neg":
                reduce_while(_PRECEDENCE[value])
                operators.append(["binary", value, at, 0])
                expect_operand = True
            elif value == ")":
                opened = reduce_to_open()
                if opened is None:
                    raise self.error("unexpected ')' without a matching '('", at)
                operators.pop()
                if opened[0] == "call":
                    name, count = opened[1], opened[3]
                    if count != PRIMITIVES[name].arity:
                        raise self.error(f"{name} takes {PRIMITIVES[name].arity} argument(s), got {count}", opened[2])
                    args = operands[len(operands) - count:]
                    del operands[len(operands) - count:]
                    operands.append(self.add(name, *args))
            elif value == ",":
                opened = reduce_to_open()
                if opened is None or opened[0] != "call":
                    raise self.error("unexpected ',' outside a function's arguments", at)
                opened[3] += 1
                expect_operand = True
            elif value == "=":
                raise self.error("unexpected '='; a definition is 'name = expression;' in front of the formula", at)
            else:
                raise self.error(f"unexpected {value!r} after a complete expression", at)
        if expect_operand or opens_call:
            raise self.error("unexpected end: the expression ended where an operand was expected", end)
        opened = reduce_to_open()
        if opened is not None:
            message = f"expected ')' to close the {opened[1]!r} opened at column {opened[2]}, the expression ended"
            raise self.error(message, end)
        return operands[-1]


def parse(text: str, max_nodes: int | None = None) -> Genome:
    """The genome of a formula such as ``"x * sigmoid(v1 * x) / group_std(x)"``.

    Identical subexpressions become one node; definitions ``name = expression;`` in front
    of the formula name subexpressions (what :func:`to_infix` prints for shared ones).
    ``max_nodes`` bounds the number of intermediate nodes (``None``: no bound); a formula
    that is a bare variable, or has a syntax error, an unknown name, an unused definition
    or too many nodes, raises ``ValueError`` saying why.
    """
    if not isinstance(text, str):
        raise ValueError(f"a layer expression must be a string, got {type(text).__name__}")
    parser = _Parser(text)
    if not parser.tokens:
        raise ValueError("empty layer expression")
    root = parser.parse()
    if root < len(INITIAL_NODES):
        raise ValueError(f"layer expression {text!r} applies no op; a layer needs at least one")
    genome = Genome(tuple(parser.nodes[: root - len(INITIAL_NODES) + 1]))
    if len(genome.live_nodes()) - len(INITIAL_NODES) != len(genome.nodes) or genome.output != root:
        genome = genome.pruned()
    if max_nodes is not None and len(genome.nodes) > max_nodes:
        raise ValueError(f"layer expression {text!r} needs {len(genome.nodes)} nodes, more than max_nodes={max_nodes}")
    return genome
