"""The expression parser's errors (the exact message and the column it points at, counted by hand) and the
printer's choices that the round-trip properties do not pin: LaTeX parentheses and definitions, and where a
shared subexpression becomes a definition (longer than ``INLINE_SHARED_CHARS`` printed characters).

Found by mutation testing (``tools/mutation.py``): the error tests matched a word of each message, so a
wrong column, a message naming the wrong thing or a LaTeX parenthesis passed.
"""
from __future__ import annotations

import ast

import pytest

from evonorm_core.search import PRIMITIVES, parse, to_infix, to_latex
from evonorm_core.search.expression import INLINE_SHARED_CHARS


def error_of(text) -> str:
    with pytest.raises(ValueError) as caught:
        parse(text)
    return str(caught.value)


AT = "cannot parse layer expression {text!r} at column {column}: {message}"


@pytest.mark.parametrize("text, column, message", [
    ("x $ x", 2, "unexpected character '$'"),
    ("x +", 3, "unexpected end: the expression ended where an operand was expected"),
    ("x + max(x)", 4, "max takes 2 argument(s), got 1"),
    ("x 1", 2, "unexpected '1' after a complete expression"),
    ("x neg v1", 2, "unexpected 'neg' after a complete expression"),
    ("x * 2", 4, "the only constant of the search space is 0, got 2"),
    ("sigmoid x", 8, "expected '(' after sigmoid"),
    ("max(x,)", 6, "unexpected ')'"),
    ("(x", 2, "expected ')' to close the '(' opened at column 0, the expression ended"),
    ("x * tanh(x", 10, "expected ')' to close the 'tanh' opened at column 4, the expression ended"),
    ("x)", 1, "unexpected ')' without a matching '('"),
    ("x = 0", 2, "unexpected '='; a definition is 'name = expression;' in front of the formula"),
    ("max((x, x))", 6, "unexpected ',' outside a function's arguments"),
    ("t1 = tanh(x);", 13, "expected an expression"),
    # definitions: the name's column, or the end of the definition (its ';')
    ("x = tanh(x); x", 0, "cannot define 'x': it is already a variable, an op or defined"),
    ("sigmoid = tanh(x); x * sigmoid", 0, "cannot define 'sigmoid': it is already a variable, an op or defined"),
    ("t = x; t = v1; t * x", 7, "cannot define 't': it is already a variable, an op or defined"),
    ("t1 = ; t1", 0, "expected a definition 'name = expression' before ';'"),
    ("t1 tanh(x); t1", 0, "expected a definition 'name = expression' before ';'"),
    (" ; x", 1, "expected a definition 'name = expression' before ';'"),
    ("t1 = tanh(; t1", 10, "unexpected end: the expression ended where an operand was expected"),
    ("t1 = (x; t1", 7, "expected ')' to close the '(' opened at column 5, the expression ended"),
])
def test_a_parse_error_says_what_and_where(text, column, message):
    assert error_of(text) == AT.format(text=text, column=column, message=message)


def test_errors_that_are_not_about_a_place():
    assert error_of(3) == "a layer expression must be a string, got int"
    assert error_of("  ") == "empty layer expression"
    assert error_of("x") == "layer expression 'x' applies no op; a layer needs at least one"
    assert error_of("t1 = tanh(x); x * v1") == "layer expression 't1 = tanh(x); x * v1' defines ['t1'] but never uses it"


def test_an_unknown_name_lists_every_accepted_name_sorted():
    message = error_of("t1 = tanh(x); t2 * t1")
    prefix = AT.format(text="t1 = tanh(x); t2 * t1", column=14, message="unknown name 't2'; accepted: ")
    assert message.startswith(prefix)
    accepted = ast.literal_eval(message.removeprefix(prefix))
    assert accepted == sorted({"x", "v0", "v1", "t1", *PRIMITIVES})


def test_a_definition_may_name_a_variable():
    assert parse("t = v1; x * t") == parse("x * v1")


def test_latex_parenthesizes_with_left_and_right():
    genome = parse("(x + v1) * x")
    assert to_infix(genome) == "(x + v1) * x"
    assert to_latex(genome) == r"\left(x + v_1\right) x"


def test_latex_lists_its_definitions_after_where():
    # t1 prints as 26 LaTeX characters and t2 as 23: both are shared and longer than INLINE_SHARED_CHARS (20)
    genome = parse("t1 = tanh(sigmoid(v1 * x) + v0); t2 = sigmoid(t1 * t1 + x); t2 * t2")
    assert to_latex(genome) == (r"t_{2} t_{2} \quad \text{where } t_{1} = \tanh(\sigma(v_1 x) + v_0), \; "
                                r"t_{2} = \sigma(t_{1} t_{1} + x)")
    # in infix, t2 is 20 characters: not longer than the limit, so it is written out where it is used
    assert to_infix(genome) == "t1 = tanh(sigmoid(v1 * x) + v0); sigmoid(t1 * t1 + x) * sigmoid(t1 * t1 + x)"


def test_a_shared_subexpression_is_named_exactly_when_longer_than_the_limit():
    assert INLINE_SHARED_CHARS == 20
    twenty = "sigmoid(x * v1 * v0)"  # 20 characters: stays inline
    assert to_infix(parse(f"{twenty} + {twenty}")) == f"{twenty} + {twenty}"
    twenty_one = "tanh((-x + v1) * -v0)"  # 21 characters, two of them the parentheses a product adds to a sum
    assert len(twenty) == 20 and len(twenty_one) == 21
    assert to_infix(parse(f"{twenty_one} * {twenty_one}")) == f"t1 = {twenty_one}; t1 * t1"
