"""The selector parser: tree shapes, precedence, type checks, errors and limits."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.core.model.selector import compile_selector
from chute.core.model.selector.parser import (
    MAX_DEPTH,
    MAX_LENGTH,
    And,
    Arithmetic,
    Between,
    Comparison,
    Constant,
    Identifier,
    In,
    IsNull,
    Like,
    Node,
    Not,
    Or,
    Sign,
    Type,
    parse,
    static_type,
)
from chute.errors import InvalidSelector

a, b, c, d = Identifier("a"), Identifier("b"), Identifier("c"), Identifier("d")


def eq(left: Node, right: Node) -> Comparison:
    return Comparison("=", left, right)


def one(value: bool | int | float | str) -> Constant:
    return Constant(value)


# -- shapes and precedence -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a", a),
        ("TRUE", one(True)),
        ("a = 'x'", eq(a, one("x"))),
        ("a <> 1", Comparison("<>", a, one(1))),
        ("a < 1.5", Comparison("<", a, one(1.5))),
        ("a <= b", Comparison("<=", a, b)),
        ("a > -1", Comparison(">", a, one(-1))),
        ("a >= 0x10", Comparison(">=", a, one(16))),
        ("a = TRUE", eq(a, one(True))),
        ("NOT a", Not(a)),
        ("a AND b", And((a, b))),
        ("a OR b", Or((a, b))),
        ("((a))", a),
    ],
)
def test_simple_shapes(text: str, tree: Node) -> None:
    assert parse(text) == tree


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        # AND binds tighter than OR
        ("a OR b AND c", Or((a, And((b, c))))),
        ("a AND b OR c", Or((And((a, b)), c))),
        ("(a OR b) AND c", And((Or((a, b)), c))),
        # NOT binds tighter than AND, looser than comparisons
        ("NOT a AND b", And((Not(a), b))),
        ("NOT a OR b", Or((Not(a), b))),
        ("NOT a = 1", Not(eq(a, one(1)))),
        ("NOT NOT a", Not(Not(a))),
        ("a AND NOT b", And((a, Not(b)))),
        # comparisons bind tighter than AND/OR
        ("a = 1 AND b = 2 OR c = 3", Or((And((eq(a, one(1)), eq(b, one(2)))), eq(c, one(3))))),
        # * / over + -
        ("a + b * c = 1", eq(Arithmetic(a, (("+", Arithmetic(b, (("*", c),))),)), one(1))),
        ("a * b + c = 1", eq(Arithmetic(Arithmetic(a, (("*", b),)), (("+", c),)), one(1))),
        ("(a + b) * c = 1", eq(Arithmetic(Arithmetic(a, (("+", b),)), (("*", c),)), one(1))),
        ("a / b / c = 1", eq(Arithmetic(a, (("/", b), ("/", c))), one(1))),
        # arithmetic binds tighter than comparison, on both sides
        (
            "a + 1 > b * 2",
            Comparison(">", Arithmetic(a, (("+", one(1)),)), Arithmetic(b, (("*", one(2)),))),
        ),
        # unary minus binds tightest
        ("-a * b = 1", eq(Arithmetic(Sign("-", a), (("*", b),)), one(1))),
        ("a * -b = 1", eq(Arithmetic(a, (("*", Sign("-", b)),)), one(1))),
        ("+a = 1", eq(Sign("+", a), one(1))),
    ],
)
def test_precedence(text: str, tree: Node) -> None:
    assert parse(text) == tree


def test_same_operator_runs_become_one_node() -> None:
    assert parse("a AND b AND c AND d") == And((a, b, c, d))
    assert parse("a OR b OR c") == Or((a, b, c))
    assert parse("(a AND b) AND c") == And((a, b, c))
    # left-associative: (a - b) + c - d, in order
    assert parse("a - b + c - d = 0") == eq(Arithmetic(a, (("-", b), ("+", c), ("-", d))), one(0))
    # a parenthesised right operand is kept apart: a - (b + c)
    assert parse("a - (b + c) = 0") == eq(
        Arithmetic(a, (("-", Arithmetic(b, (("+", c),))),)), one(0)
    )


def test_a_long_flat_selector_makes_a_shallow_tree() -> None:
    text = " OR ".join(f"p{i} = {i}" for i in range(300))
    tree = parse(text)
    assert isinstance(tree, Or)
    assert len(tree.operands) == 300
    assert tree.depth == 3


@pytest.mark.parametrize(
    ("text", "value"),
    [("-5 = a", -5), ("- -5 = a", 5), ("+5 = a", 5), ("-1.5 = a", -1.5), ("-0x10 = a", -16)],
)
def test_signs_on_literals_are_folded(text: str, value: float) -> None:
    assert parse(text) == eq(one(value), a)


def test_between() -> None:
    assert parse("a BETWEEN 1 AND 2") == Between(a, one(1), one(2))
    assert parse("a NOT BETWEEN -1 AND b + 1") == Between(
        a, one(-1), Arithmetic(b, (("+", one(1)),)), negated=True
    )
    # the AND inside BETWEEN belongs to it; the next AND is logical
    assert parse("a BETWEEN 1 AND 2 AND b") == And((Between(a, one(1), one(2)), b))


def test_in() -> None:
    assert parse("a IN ('x')") == In(a, ("x",))
    assert parse("a NOT IN ('x', 'y''z', '')") == In(a, ("x", "y'z", ""), negated=True)


def test_like() -> None:
    assert parse("a LIKE 'x%'") == Like(a, "x%")
    assert parse("a NOT LIKE '\\_%' ESCAPE '\\'") == Like(a, "\\_%", "\\", negated=True)
    assert parse("a LIKE '!%' escape '!'") == Like(a, "!%", "!")


def test_is_null() -> None:
    assert parse("a IS NULL") == IsNull(a)
    assert parse("a is not null") == IsNull(a, negated=True)
    assert parse("a IS NULL OR b IS NOT NULL") == Or((IsNull(a), IsNull(b, negated=True)))


def test_keywords_are_case_insensitive() -> None:
    assert parse("a between 1 and 2 or not b in ('x')") == parse(
        "a BETWEEN 1 AND 2 OR NOT b IN ('x')"
    )


def test_positions_are_recorded() -> None:
    tree = parse("x = 1 AND  yy > 2")
    assert isinstance(tree, And)
    right = tree.operands[1]
    assert isinstance(right, Comparison)
    assert (tree.pos, right.pos, right.left.pos, right.right.pos) == (0, 11, 11, 16)


# -- static types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'x' = a", Type.BOOLEAN),
        ("a", Type.ANY),
        ("JMSRedelivered", Type.BOOLEAN),
        ("JMSPriority", Type.NUMBER),
        ("JMSType", Type.STRING),
        ("-a", Type.NUMBER),
        ("a + 1", Type.NUMBER),
        ("'x'", Type.STRING),
        ("1.5", Type.NUMBER),
        ("FALSE", Type.BOOLEAN),
    ],
)
def test_static_type(text: str, expected: Type) -> None:
    tokens_parsed = parse(f"({text}) IS NULL")
    assert isinstance(tokens_parsed, IsNull)
    assert static_type(tokens_parsed.operand) is expected


@pytest.mark.parametrize(
    "text",
    [
        "a = 1 AND b",  # properties may be booleans
        "a",
        "NOT a",
        "a = b",
        "a < b",
        "a + b > 1",
        "a LIKE 'x'",
        "JMSType LIKE 'x%'",
        "JMSDeliveryMode IN ('PERSISTENT')",
        "JMSRedelivered = TRUE",
        "JMSRedelivered AND JMSPriority > 4",
        "(a = 1) = (b = 2)",
        "(a = 1) IS NULL",
        "1 = 1.0",
        "TRUE",
        "'a' = 'b'",
    ],
)
def test_well_typed_selectors_are_accepted(text: str) -> None:
    parse(text)


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # syntax
        ("a =", "expected a property, a literal, '(' or NOT but found end of selector at column 4"),
        ("a = = 1", "expected a property, a literal, '(' or NOT but found '=' at column 5"),
        ("= 1", "but found '=' at column 1"),
        (
            "a b",
            "expected an operator or the end of the selector but found identifier 'b' at column 3",
        ),
        (
            "(a = 1",
            "expected ')' to close the '(' at column 1 but found end of selector at column 7",
        ),
        ("a = 1)", "')' has no matching '(' at column 6"),
        ("()", "but found ')' at column 2"),
        ("a = 1 AND", "but found end of selector at column 10"),
        ("a = 1 = 2", "comparisons cannot be chained (add parentheses) at column 7"),
        ("a < b < c", "comparisons cannot be chained"),
        ("a BETWEEN 1 AND 2 = TRUE", "comparisons cannot be chained"),
        ("a = NOT b", "NOT cannot be used here without parentheses at column 5"),
        ("a + NOT b = 1", "NOT cannot be used here"),
        ("a = NULL", "NULL can only be tested with IS NULL or IS NOT NULL at column 5"),
        ("NULL IS NULL", "NULL can only be tested"),
        ("a IS 1", "expected NULL or NOT after IS but found number 1 at column 6"),
        ("a IS NOT 1", "expected NULL after IS NOT"),
        ("a NOT b", "expected BETWEEN, IN or LIKE after NOT but found identifier 'b' at column 7"),
        ("a NOT = 1", "expected BETWEEN, IN or LIKE after NOT"),
        (
            "a BETWEEN 1 OR 2",
            "expected AND between the bounds of BETWEEN but found OR at column 13",
        ),
        ("a BETWEEN 1", "expected AND between the bounds of BETWEEN but found end of selector"),
        ("a IN 'x'", "expected '(' after IN but found string 'x' at column 6"),
        ("a IN ()", "expected a string literal in the IN list but found ')' at column 7"),
        ("a IN ('x',)", "expected a string literal after ',' in the IN list but found ')'"),
        ("a IN ('x' 'y')", "expected ',' or ')' in the IN list but found string 'y'"),
        ("a IN ('x', 1)", "but found number 1 at column 12"),
        ("a IN (b)", "but found identifier 'b'"),
        (
            "a LIKE b",
            "expected a string literal pattern after LIKE but found identifier 'b' at column 8",
        ),
        ("a LIKE 'x' ESCAPE", "expected a string literal after ESCAPE"),
        (
            "a LIKE 'x' ESCAPE ''",
            "the ESCAPE string must be exactly one character, not '' at column 19",
        ),
        ("a LIKE 'x' ESCAPE 'ab'", "exactly one character, not 'ab'"),
        ("a LIKE 'x!' ESCAPE '!'", "LIKE pattern ends with its ESCAPE character at column 8"),
        ("a LIKE 'x!!!' ESCAPE '!'", "ends with its ESCAPE character"),
        ("AND = 1", "but found AND at column 1"),
        ("a = 1 OR OR b = 2", "but found OR at column 10"),
        # types
        ("1", "the selector as a whole must be a boolean, not a number at column 1"),
        ("'x'", "must be a boolean, not a string"),
        ("a + 1", "the selector as a whole must be a boolean, not a number"),
        ("JMSPriority", "must be a boolean, not a number"),
        ("NOT 5", "the operand of NOT must be a boolean, not a number at column 5"),
        ("a = 1 AND 'x'", "the right operand of AND must be a boolean, not a string at column 11"),
        ("1 OR a", "the left operand of OR must be a boolean, not a number at column 1"),
        ("'x' + a = 1", "the left operand of '+' must be a number, not a string"),
        ("a * TRUE = 1", "the right operand of '*' must be a number, not a boolean at column 5"),
        ("-'x' = a", "the operand of unary '-' must be a number, not a string at column 2"),
        ("-(a = 1) = 1", "the operand of unary '-' must be a number, not a boolean"),
        ("a > 'x'", "the right operand of '>' must be a number, not a string at column 5"),
        ("TRUE <= a", "the left operand of '<=' must be a number, not a boolean"),
        ("JMSType < 5", "the left operand of '<' must be a number, not a string"),
        ("1 = 'x'", "'=' compares a number with a string, which can never match at column 3"),
        ("TRUE <> 1", "'<>' compares a boolean with a number"),
        ("JMSPriority = 'high'", "'=' compares a number with a string"),
        ("JMSRedelivered = 'yes'", "compares a boolean with a string"),
        ("'x' BETWEEN 1 AND 2", "the operand of BETWEEN must be a number, not a string"),
        ("a BETWEEN 'a' AND 'z'", "the lower bound of BETWEEN must be a number, not a string"),
        ("a BETWEEN 1 AND TRUE", "the upper bound of BETWEEN must be a number, not a boolean"),
        ("5 IN ('5')", "the operand of IN must be a string, not a number"),
        ("JMSPriority LIKE '5'", "the operand of LIKE must be a string, not a number"),
    ],
)
def test_errors_say_what_was_expected_and_where(text: str, message: str) -> None:
    with pytest.raises(InvalidSelector) as info:
        parse(text)
    assert message in str(info.value)
    assert str(info.value).startswith("invalid selector: ")


@pytest.mark.parametrize("text", ["", " ", "\t\n  "])
def test_empty_selector_is_invalid(text: str) -> None:
    with pytest.raises(InvalidSelector, match="empty"):
        compile_selector(text)


def test_non_string_selector_is_invalid() -> None:
    with pytest.raises(InvalidSelector, match="expected a string, not list"):
        compile_selector(["a = 1"])  # type: ignore[arg-type]


# -- limits --------------------------------------------------------------------------------------


def test_length_limit() -> None:
    padding = MAX_LENGTH - len("a = ''")
    compile_selector("a = '" + "x" * padding + "'")
    with pytest.raises(InvalidSelector, match=f"{MAX_LENGTH + 1} characters long, the limit is"):
        compile_selector("a = '" + "x" * (padding + 1) + "'")


_DEEP_SHAPES: list[Callable[[int], str]] = [
    lambda k: "(" * k + "a" + ")" * k,
    lambda k: "NOT " * k + "a",
    lambda k: "a = " + "-" * k + "b",
    lambda k: "a = 1 AND (" * k + "b" + ")" * k,
    lambda k: "a = (" * k + "1" + ")" * k,
]


@pytest.mark.parametrize("build", _DEEP_SHAPES)
def test_nesting_limit(build: Callable[[int], str]) -> None:
    compile_selector(build(MAX_DEPTH // 2 - 1))  # every shape allows this much
    deepest = max(k for k in range(MAX_LENGTH) if len(build(k)) <= MAX_LENGTH)
    for k in (MAX_DEPTH + 1, deepest):
        with pytest.raises(InvalidSelector, match=f"selector nests deeper than {MAX_DEPTH} levels"):
            compile_selector(build(k))


def test_nesting_limit_counts_parentheses_and_prefix_operators_one_each() -> None:
    compile_selector("(" * (MAX_DEPTH - 1) + "a" + ")" * (MAX_DEPTH - 1))
    compile_selector("NOT " * (MAX_DEPTH - 1) + "a")
    with pytest.raises(InvalidSelector, match="nests deeper"):
        compile_selector("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH)


def test_tree_depth_is_limited_too() -> None:
    # Each parenthesis adds one level of nesting but three of tree (OR, AND, =).
    text = "a"
    for _ in range(30):
        text = f"({text} = TRUE AND TRUE OR TRUE)"
    assert parse(text).depth == 91
    for _ in range(4):
        text = f"({text} = TRUE AND TRUE OR TRUE)"
    with pytest.raises(InvalidSelector, match=f"selector nests deeper than {MAX_DEPTH} levels"):
        parse(text)


def test_unbalanced_opening_parentheses_of_any_count() -> None:
    with pytest.raises(InvalidSelector):
        compile_selector("(" * 4000)


def test_long_flat_chains_within_the_length_limit_compile() -> None:
    for text in (
        "a = 1 OR " * 450 + "b",
        "a + " * 1000 + "a > 0",
        "NOT a AND " * 400 + "b",
        "a IN (" + ", ".join(["'x'"] * 800) + ")",
    ):
        assert len(text) <= MAX_LENGTH
        compile_selector(text)


# -- only InvalidSelector, whatever the input -------------------------------------------------

_VOCABULARY = [
    "a", "b", "JMSPriority", "JMSType", "JMSRedelivered", "'x'", "'%_'", "''", "1", "2.5", "0x1F",
    "07", "1e3", ".5", "TRUE", "FALSE", "NULL", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS",
    "ESCAPE", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "(", ")", ",", "'", "!", "\n",
]  # fmt: skip


@settings(max_examples=600)
@given(st.text(max_size=80))
def test_arbitrary_text_raises_only_invalid_selector(text: str) -> None:
    with contextlib.suppress(InvalidSelector):
        compile_selector(text)


@settings(max_examples=1000)
@given(st.lists(st.sampled_from(_VOCABULARY), max_size=25))
def test_arbitrary_token_soup_raises_only_invalid_selector(words: list[str]) -> None:
    with contextlib.suppress(InvalidSelector):
        compile_selector(" ".join(words))


@settings(max_examples=200)
@given(st.text(alphabet="()NOT a-=", min_size=150, max_size=3000))
def test_deep_garbage_raises_only_invalid_selector(text: str) -> None:
    with contextlib.suppress(InvalidSelector):
        compile_selector(text)
