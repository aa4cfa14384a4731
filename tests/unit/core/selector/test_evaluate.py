"""Selector evaluation: JMS semantics, three-valued logic, headers, typed values, robustness."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.core.model.selector import Selector, compile_selector
from chute.core.model.selector.evaluate import HEADERS
from chute.core.model.selector.like import like_matcher
from chute.core.model.selector.parser import HEADER_TYPES
from chute.message import Byte, Float, Int, Long, Message, PropertyValue, Short


def msg(**properties: Any) -> Message:
    return Message(b"body", properties=properties)


def check(selector: str, expected: bool | None, **properties: Any) -> None:
    """The selector's three-valued result on a message with these properties."""
    sel = compile_selector(selector)
    m = msg(**properties)
    assert sel.evaluate(m) is expected, f"{selector!r} on {properties}"
    assert sel.matches(m) is (expected is True)


# -- the public surface ----------------------------------------------------------------------


def test_the_example_from_the_docs() -> None:
    sel = compile_selector("region = 'eu' AND JMSPriority > 5")
    assert isinstance(sel, Selector)
    assert sel.text == "region = 'eu' AND JMSPriority > 5"
    assert sel.matches(Message(b"", properties={"region": "eu"}, priority=6))
    assert not sel.matches(Message(b"", properties={"region": "eu"}, priority=5))
    assert not sel.matches(Message(b"", properties={"region": "us"}, priority=9))
    assert not sel.matches(Message(b"", priority=9))


def test_compile_is_cached() -> None:
    assert compile_selector("cached = 1") is compile_selector("cached = 1")


def test_selector_value_semantics() -> None:
    first, second = compile_selector("a = 1"), compile_selector("a = 1 ")
    assert repr(first) == "Selector('a = 1')"
    assert first != second
    assert first != "a = 1"
    assert first == Selector("a = 1", lambda m: True)
    assert len({first, Selector("a = 1", lambda m: False)}) == 1


# -- comparisons -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "value", "expected"),
    [
        ("x = 5", 5, True),
        ("x = 5", 6, False),
        ("x = 5", 5.0, True),
        ("x = 5.0", 5, True),
        ("x = 0.5", 0.5, True),
        ("x <> 5", 5, False),
        ("x <> 5", 6, True),
        ("x < 5", 4, True),
        ("x < 5", 5, False),
        ("x <= 5", 5, True),
        ("x <= 5", 5.5, False),
        ("x > 5", 5.5, True),
        ("x > 5", 5, False),
        ("x >= 5", 5, True),
        ("x >= 5", 4.999, False),
        ("5 < x", 6, True),  # a literal on the left is mirrored
        ("5 >= x", 6, False),
        ("x > -1", -0.5, True),
        ("x > 1e300", math.inf, True),
        ("x = 'eu'", "eu", True),
        ("x = 'eu'", "EU", False),
        ("x <> 'eu'", "us", True),
        ("x <> 'eu'", "eu", False),
        ("'eu' = x", "eu", True),
        ("x = 'it''s'", "it's", True),
        ("x = ''", "", True),
        ("x = TRUE", True, True),
        ("x = TRUE", False, False),
        ("x = FALSE", False, True),
        ("x <> TRUE", False, True),
        ("x <> FALSE", False, False),
    ],
)
def test_comparison_with_a_literal(selector: str, value: PropertyValue, expected: bool) -> None:
    check(selector, expected, x=value)


@pytest.mark.parametrize(
    ("selector", "x", "y", "expected"),
    [
        ("x = y", 3, 3.0, True),
        ("x = y", "a", "a", True),
        ("x = y", True, True, True),
        ("x = y", False, True, False),
        ("x <> y", "a", "b", True),
        ("x < y", 1, 1.5, True),
        ("x >= y", 2, 2, True),
        ("x > y", 10**30, 1e29, True),
        ("(x > 1) = (y > 1)", 2, 3, True),
        ("(x > 1) <> (y > 1)", 2, 0, True),
    ],
)
def test_comparison_between_properties(
    selector: str, x: PropertyValue, y: PropertyValue, expected: bool
) -> None:
    check(selector, expected, x=x, y=y)


@pytest.mark.parametrize(
    ("selector", "value"),
    [
        ("x = 1", "1"),
        ("x = 1", True),  # bool is not a number, whatever Python thinks
        ("x = 0", False),
        ("x = 1.0", True),
        ("x = TRUE", 1),
        ("x = FALSE", 0),
        ("x = 'true'", True),
        ("x = '5'", 5),
        ("x < 5", "4"),
        ("x > 0", True),
        ("x >= 0", "a"),
    ],
)
def test_unlike_types_are_unequal_and_unordered(selector: str, value: PropertyValue) -> None:
    check(selector, False, x=value)
    check(f"NOT ({selector})", True, x=value)


@pytest.mark.parametrize(
    ("selector", "x", "y"),
    [
        ("x = y", 1, "1"),
        ("x = y", 1, True),
        ("x = y", False, 0),
        ("x < y", "a", "b"),  # ordering is for numbers only
        ("x < y", True, 2),
        ("x >= y", 1, "0"),
    ],
)
def test_unlike_property_types_are_unequal_and_unordered(
    selector: str, x: PropertyValue, y: PropertyValue
) -> None:
    check(selector, False, x=x, y=y)


def test_not_equal_is_the_negation_of_equal_for_unlike_types() -> None:
    check("x <> 1", True, x="1")
    check("x <> 1", True, x=True)
    check("x <> 'a'", True, x=1)
    check("x <> TRUE", True, x=1)
    check("x <> y", True, x=1, y="1")
    check("x <> y", True, x=True, y=1)


@pytest.mark.parametrize(
    "selector",
    ["x = 1", "x <> 1", "x < 1", "x >= 1", "x = 'a'", "x <> 'a'", "x = TRUE", "x <> FALSE",
     "1 = x", "'a' <> x", "x = y", "y = x", "x <> y", "x < y", "y > x"],
)  # fmt: skip
def test_a_missing_operand_makes_a_comparison_unknown(selector: str) -> None:
    check(selector, None, y=1)
    check(selector, None)


def test_typed_property_values_are_plain_numbers() -> None:
    typed = {"b": Byte(5), "s": Short(5), "i": Int(5), "l": Long(5), "f": Float(5.0), "d": 5.0}
    for name in typed:
        check(f"{name} = 5", True, **typed)
        check(f"{name} > 4.5", True, **typed)
        check(f"{name} BETWEEN 5 AND 5", True, **typed)
        check(f"{name} * 2 = 10", True, **typed)
        check(f"-{name} = -5", True, **typed)
        check(f"{name} = b", True, **typed)
        check(f"{name} <> '5'", True, **typed)


# -- arithmetic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("x + 1 = 8", True),
        ("x - 10 = -3", True),
        ("x * 2 = 14", True),
        ("x / 2 = 3", True),  # integer division, as in Java
        ("x / 2.0 = 3.5", True),  # a double on either side: a double
        ("x / 7 = 1", True),
        ("x + 2 * 3 = 13", True),  # * before +
        ("(x + 2) * 3 = 27", True),
        ("x - 3 - 2 = 2", True),  # left to right
        ("x - (3 - 2) = 6", True),
        ("x / 7 * 2 = 2", True),
        ("x * y = 17.5", True),
        ("-x = -7", True),
        ("- -x = 7", True),
        ("+x = 7", True),
        ("-x * -y = 17.5", True),
        ("x + 0.5 > 7", True),
        ("x * 1000000000000 * 1000000000000 = -4420394637261275136", True),  # long wraps
        ("2 * 3 + 1 = 7", True),
        ("1 / 3 = 1 / 3", True),
        ("1 / 3 = 0", True),
        ("1.0 / 3 = 1 / 3.0", True),
    ],
)
def test_arithmetic(selector: str, expected: bool) -> None:
    check(selector, expected, x=7, y=2.5)


@pytest.mark.parametrize(
    "selector",
    [
        "x / 0 = 1",
        "x / (x - x) = 0",
        "1 / 0 = 1",
        "0 / 0 = 0",
        "s + 1 = 1",
        "1 - s = 1",
        "t * 2 = 2",  # a boolean is not a number
        "-s = 1",
        "+t = 1",
        "missing + 1 = 1",
        "1 + missing = 1",
        "-missing = 1",
        "x + s + 1 = 1",
        "big + 0.5 > 0",  # too large for a float
        "big / 3 > 0",
    ],
)
def test_arithmetic_on_non_numbers_or_by_zero_is_unknown(selector: str) -> None:
    check(selector, None, x=7, y=2.5, s="7", t=True, big=10**400)
    expression = selector.rsplit(" ", 2)[0]  # the arithmetic, without "= 1"
    check(f"({expression}) IS NULL", True, x=7, y=2.5, s="7", t=True, big=10**400)


# -- BETWEEN, IN, LIKE, IS NULL -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "between"),
    [(14, False), (15, True), (17.5, True), (19, True), (19.01, False), (-1, False)],
)
def test_between_is_inclusive(value: float, between: bool) -> None:
    check("age BETWEEN 15 AND 19", between, age=value)
    check("age NOT BETWEEN 15 AND 19", not between, age=value)
    check("age BETWEEN lo AND hi", between, age=value, lo=15, hi=19.0)
    check("age NOT BETWEEN lo AND hi", not between, age=value, lo=15, hi=19.0)
    check("age + 1 BETWEEN 15 + 1 AND 20 - 1 + 1", between, age=value)


def test_between_with_null_or_unlike_values() -> None:
    for selector in ("age BETWEEN 1 AND 2", "age BETWEEN lo AND hi"):
        check(selector, None, lo=1, hi=2)
        check(selector, False, age="1", lo=1, hi=2)
        check(selector, False, age=True, lo=1, hi=2)
        check(selector.replace("BETWEEN", "NOT BETWEEN"), None, lo=1, hi=2)
        check(selector.replace("BETWEEN", "NOT BETWEEN"), True, age="1", lo=1, hi=2)
    # age >= lo AND age <= hi with one bound missing: unknown unless the other is false
    check("age BETWEEN lo AND hi", None, age=5, hi=10)
    check("age BETWEEN lo AND hi", False, age=5, hi=4)
    check("age BETWEEN lo AND hi", None, age=5, lo=1)
    check("age BETWEEN lo AND hi", False, age=5, lo=6)
    check("age BETWEEN lo AND hi", None, age=5)
    check("age BETWEEN lo AND hi", False, age=5, lo="a", hi=10)
    check("age NOT BETWEEN lo AND hi", True, age=5, hi=4)
    check("age NOT BETWEEN lo AND hi", None, age=5, hi=10)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("UK", True), ("France", True), ("", False), ("uk", False), ("Peru", False)],
)
def test_in(value: str, expected: bool) -> None:
    check("Country IN ('UK', 'US', 'France')", expected, Country=value)
    check("Country NOT IN ('UK', 'US', 'France')", not expected, Country=value)


def test_in_with_null_or_unlike_values() -> None:
    check("Country IN ('UK')", None)
    check("Country NOT IN ('UK')", None)
    check("n IN ('1')", False, n=1)
    check("n NOT IN ('1')", True, n=1)
    check("JMSType IN ('a')", None)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("12%3", "123", True),
        ("12%3", "12993", True),
        ("12%3", "1234", False),
        ("l_se", "lose", True),
        ("l_se", "loose", False),
        ("abc", "abc", True),
        ("abc", "abcd", False),
        ("abc%", "abcd", True),
        ("abc%", "ab", False),
        ("%abc", "xxabc", True),
        ("%abc", "abcx", False),
        ("a%c", "ac", True),
        ("a%c", "abbbc", True),
        ("a%c", "c", False),
        ("ab%ba", "aba", False),  # the prefix and suffix may not overlap
        ("%b%", "abc", True),
        ("%b%", "ac", False),
        ("%", "", True),
        ("%%", "anything", True),
        ("_", "", False),
        ("_", "x", True),
        ("__", "x", False),
        ("%_%", "", False),
        ("a_%_c", "abbc", True),
        ("a_%_c", "abc", False),
        ("%a%b%c%", "xaxbxcx", True),
        ("%a%b%c%", "cba", False),
        ("%a_b%", "zzaxbzz", True),
        ("a.c", "abc", False),  # regex characters are literal
        ("a.c", "a.c", True),
        ("(x)*[y]+$^|\\", "(x)*[y]+$^|\\", True),
        ("%\n%", "one\ntwo", True),  # % and _ match newlines
        ("one_two", "one\ntwo", True),
        ("été%", "été 2024", True),
    ],
)
def test_like(pattern: str, text: str, expected: bool) -> None:
    literal = pattern.replace("'", "''")
    check(f"s LIKE '{literal}'", expected, s=text)
    check(f"s NOT LIKE '{literal}'", not expected, s=text)


@pytest.mark.parametrize(
    ("selector", "text", "expected"),
    [
        ("name LIKE 'a\\_%' ESCAPE '\\'", "a_b", True),
        ("name LIKE 'a\\_%' ESCAPE '\\'", "a_", True),
        ("name LIKE 'a\\_%' ESCAPE '\\'", "ab", False),
        ("name LIKE 'a\\_%' ESCAPE '\\'", "abc", False),
        ("name LIKE '\\%%' ESCAPE '\\'", "%off", True),
        ("name LIKE '\\%%' ESCAPE '\\'", "50%", False),
        ("name LIKE '%!%' ESCAPE '!'", "50%", True),
        ("name LIKE '!!' ESCAPE '!'", "!", True),
        ("name LIKE 'a!b' ESCAPE '!'", "ab", True),  # an escaped ordinary character is itself
        ("name LIKE '%%_' ESCAPE '%'", "%x", True),  # the escape may be a wildcard character
        ("name LIKE '%%_' ESCAPE '%'", "x%", False),
        ("name LIKE '%%_' ESCAPE '%'", "%", False),
        ("name LIKE '''%'", "'quoted'", True),
    ],
)
def test_like_escape(selector: str, text: str, expected: bool) -> None:
    check(selector, expected, name=text)


def test_like_with_null_or_unlike_values() -> None:
    check("s LIKE '%'", None)
    check("s NOT LIKE '%'", None)
    check("s LIKE '1%'", False, s=123)
    check("s NOT LIKE '1%'", True, s=123)
    check("s LIKE '%'", False, s=True)


def _reference_like(pattern: str, text: str) -> bool:
    """Textbook dynamic programming over (pattern, text): slow, obviously right."""
    reachable = [True] + [False] * len(text)
    for ch in pattern:
        if ch == "%":
            for i in range(1, len(text) + 1):
                reachable[i] = reachable[i] or reachable[i - 1]
        else:
            reachable = [False] + [
                reachable[i] and (ch == "_" or ch == text[i]) for i in range(len(text))
            ]
    return reachable[-1]


@settings(max_examples=800)
@given(st.text(alphabet="ab%_.", max_size=10), st.text(alphabet="ab.\n", max_size=12))
def test_like_agrees_with_a_reference_matcher(pattern: str, text: str) -> None:
    assert like_matcher(pattern)(text) is _reference_like(pattern, text)


def test_like_has_no_catastrophic_backtracking() -> None:
    matcher = like_matcher("%a" * 40 + "%b")
    assert matcher("a" * 5000) is False  # a naive .*a.*a... regex would not return
    assert matcher("a" * 5000 + "b") is True


def test_is_null() -> None:
    check("x IS NULL", True)
    check("x IS NULL", False, x=0)
    check("x IS NULL", False, x="")
    check("x IS NULL", False, x=False)
    check("x IS NOT NULL", False)
    check("x IS NOT NULL", True, x=False)
    check("JMSCorrelationID IS NULL", True)
    check("x + 1 IS NULL", True, x="a")
    check("(x = 1) IS NULL", True)
    check("(x = 1) IS NOT NULL", True, x=2)


# -- three-valued logic -------------------------------------------------------------------------

T, F, U = "t = 1", "t = 2", "missing = 1"  # TRUE, FALSE, unknown
_VALUE = {T: True, F: False, U: None}


@pytest.mark.parametrize(
    ("left", "right", "conjunction", "disjunction"),
    [
        (T, T, True, True),
        (T, F, False, True),
        (T, U, None, True),
        (F, T, False, True),
        (F, F, False, False),
        (F, U, False, None),
        (U, T, None, True),
        (U, F, False, None),
        (U, U, None, None),
    ],
)
def test_and_or_truth_tables(
    left: str, right: str, conjunction: bool | None, disjunction: bool | None
) -> None:
    check(f"{left} AND {right}", conjunction, t=1)
    check(f"{left} OR {right}", disjunction, t=1)
    # the same in a longer run of one operator
    check(f"{left} AND {T} AND {right}", conjunction, t=1)
    check(f"{left} OR {F} OR {right}", disjunction, t=1)


@pytest.mark.parametrize(("operand", "negation"), [(T, False), (F, True), (U, None)])
def test_not_truth_table(operand: str, negation: bool | None) -> None:
    check(f"NOT {operand}", negation, t=1)
    check(f"NOT NOT {operand}", _VALUE[operand], t=1)


def test_a_lone_property_is_a_boolean() -> None:
    check("flag", True, flag=True)
    check("flag", False, flag=False)
    check("flag", None)
    check("flag", None, flag="true")  # only a real boolean is TRUE or FALSE
    check("flag", None, flag=1)
    check("NOT flag", True, flag=False)
    check("NOT flag", None, flag=1)
    check("flag AND n > 1", True, flag=True, n=2)
    check("flag OR n > 1", None, flag="yes", n=0)
    check("TRUE", True)
    check("FALSE OR TRUE", True)
    check("JMSRedelivered", False)


# -- headers ---------------------------------------------------------------------------------------


def test_every_header_has_a_getter_and_a_type() -> None:
    assert HEADERS.keys() == HEADER_TYPES.keys()


def test_headers_map_to_message_fields() -> None:
    m = Message(
        b"",
        id="id-1",
        priority=7,
        timestamp=1_700_000_000_000,
        expiration=1_800_000_000_000,
        correlation_id="corr",
        reply_to="queue:replies",
        type="order",
        persistent=False,
        redelivered=True,
        delivery_count=3,
        properties={"JMSPriority_": 1},
    )
    for selector in [
        "JMSMessageID = 'ID:id-1'",
        "JMSPriority = 7",
        "JMSPriority > 4 AND JMSPriority BETWEEN 7 AND 9",
        "JMSTimestamp = 1700000000000",
        "JMSExpiration - JMSTimestamp = 100000000000",
        "JMSCorrelationID = 'corr'",
        "JMSReplyTo = 'replies'",
        "JMSType = 'order'",
        "JMSType LIKE 'ord%'",
        "JMSDeliveryMode = 'NON_PERSISTENT'",
        "JMSRedelivered",
        "JMSRedelivered = TRUE",
        "JMSXDeliveryCount = 3",
        "JMSPriority_ = 1",  # a property, not a header
    ]:
        assert compile_selector(selector).matches(m), selector
    defaults = Message(b"")
    for selector, expected in [
        ("JMSDeliveryMode = 'PERSISTENT'", True),
        ("JMSPriority = 4", True),
        ("JMSRedelivered", False),
        ("JMSXDeliveryCount IS NULL", True),
        ("JMSXDeliveryCount = 0", None),
        ("JMSCorrelationID IS NULL", True),
        ("JMSReplyTo IS NULL", True),
        ("JMSType IS NULL", True),
        ("JMSType = 'order'", None),
    ]:
        assert compile_selector(selector).evaluate(defaults) is expected, selector


@pytest.mark.parametrize(
    ("message_id", "jms_id"),
    [
        ("0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4", "ID:0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4"),  # native
        ("ID:1795418161834000-1189107306", "ID:1795418161834000-1189107306"),  # DropboxMQ's
        ("order-1", "ID:order-1"),  # chosen by a producer
        ("id:lower", "ID:id:lower"),  # the prefix is case-sensitive
    ],
)
def test_jms_message_id_always_carries_the_id_prefix(message_id: str, jms_id: str) -> None:
    """JMS: every JMSMessageID starts with ``ID:``; an id that has it is not given it twice."""
    m = Message(b"", id=message_id)
    assert compile_selector(f"JMSMessageID = '{jms_id}'").matches(m)
    assert compile_selector("JMSMessageID LIKE 'ID:%'").matches(m)
    assert not compile_selector("JMSMessageID LIKE 'ID:ID:%'").matches(m)
    if message_id != jms_id:
        assert not compile_selector(f"JMSMessageID = '{message_id}'").matches(m)


@pytest.mark.parametrize(
    ("reply_to", "name"),
    [
        ("queue:replies", "replies"),
        ("topic:news.eu", "news.eu"),
        ("queue:__tmp__.c1.7", "__tmp__.c1.7"),
        ("queue:a:b", "a:b"),  # a name may hold ':'
        ("replies", "replies"),  # a bare name is a queue's
    ],
)
def test_jms_reply_to_is_the_destination_s_plain_name(reply_to: str, name: str) -> None:
    m = Message(b"", reply_to=reply_to)
    assert compile_selector(f"JMSReplyTo = '{name}'").matches(m)
    if reply_to != name:
        assert not compile_selector(f"JMSReplyTo = '{reply_to}'").matches(m)
    assert compile_selector(f"JMSReplyTo IN ('other', '{name}')").matches(m)
    assert compile_selector("JMSReplyTo IS NOT NULL").matches(m)


@pytest.mark.parametrize(
    ("count", "results"),
    [
        # count: IS NULL, = 1, > 0, NOT (> 0)
        (0, (True, None, None, None)),  # never delivered: no count, as a DropboxMQ name has none
        (1, (False, True, True, False)),
        (3, (False, False, True, False)),
    ],
)
def test_jms_x_delivery_count_is_null_without_a_count(
    count: int, results: tuple[bool | None, ...]
) -> None:
    m = Message(b"", delivery_count=count)
    selectors = [
        "JMSXDeliveryCount IS NULL",
        "JMSXDeliveryCount = 1",
        "JMSXDeliveryCount > 0",
        "NOT (JMSXDeliveryCount > 0)",
    ]
    assert [compile_selector(s).evaluate(m) for s in selectors] == list(results)


def test_header_names_are_case_sensitive_and_not_properties() -> None:
    m = Message(b"", priority=9, properties={"jmspriority": 1, "JMSPriority": 1})
    assert compile_selector("JMSPriority = 9").matches(m)
    assert compile_selector("jmspriority = 1").matches(m)


# -- robustness --------------------------------------------------------------------------------


class _Hostile:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")

    __hash__ = object.__hash__


def test_matches_never_raises_on_non_jms_values(caplog: pytest.LogCaptureFixture) -> None:
    sel = compile_selector("x = 'a'")
    m = Message(b"", properties={"x": _Hostile()})  # type: ignore[dict-item]
    with caplog.at_level(logging.ERROR, logger="chute.selector"):
        assert sel.matches(m) is False
    assert "treating it as no match" in caplog.text


def test_unvalidated_header_values_follow_the_type_rules() -> None:
    # Message() does not validate (Message.create does); the selector copes regardless.
    odd = Message(b"", priority="high", type=5, redelivered=1)  # type: ignore[arg-type]
    for selector, expected in [
        ("JMSPriority > 5", False),
        ("JMSPriority = 5", False),
        ("JMSPriority + 1 > 5", None),
        ("JMSType = 'x'", False),
        ("JMSType LIKE 'x'", False),
        ("JMSRedelivered", None),
        ("JMSRedelivered = TRUE", False),
    ]:
        assert compile_selector(selector).evaluate(odd) is expected, selector


def _number(name: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(name),
        st.sampled_from(["0", "1", "-1", "2.5", "1e308", "0x7FFFFFFFFFFFFFFF", "JMSPriority"]),
    )


def _ends_cleanly(pattern: str) -> bool:
    """False if the pattern ends with an unescaped '!', which the parser rejects."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "!":
            if i + 1 == len(pattern):
                return False
            i += 1
        i += 1
    return True


def _selectors() -> st.SearchStrategy[str]:
    names = st.sampled_from(["a", "b", "c"])
    numbers = st.recursive(
        names.flatmap(_number),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from("+-*/"), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda x: f"-{x}"),
        ),
        max_leaves=6,
    )
    strings = st.one_of(names, st.sampled_from(["'x'", "''", "'1'", "JMSType"]))
    patterns = st.text(alphabet="x%_!", max_size=5).filter(_ends_cleanly)
    atoms = st.one_of(
        names,
        st.tuples(numbers, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), numbers).map(
            " ".join
        ),
        st.tuples(strings, st.sampled_from(["=", "<>"]), strings).map(" ".join),
        st.tuples(names, st.sampled_from(["=", "<>"]), st.sampled_from(["TRUE", "FALSE"])).map(
            " ".join
        ),
        st.tuples(numbers, numbers, numbers).map(lambda t: f"{t[0]} BETWEEN {t[1]} AND {t[2]}"),
        st.tuples(numbers, numbers, numbers).map(lambda t: f"{t[0]} NOT BETWEEN {t[1]} AND {t[2]}"),
        strings.map(lambda s: f"{s} IN ('x', '1', '')"),
        strings.map(lambda s: f"{s} NOT IN ('x')"),
        st.tuples(strings, patterns).map(lambda t: f"{t[0]} LIKE '{t[1]}' ESCAPE '!'"),
        st.tuples(strings, patterns).map(lambda t: f"{t[0]} NOT LIKE '{t[1]}' ESCAPE '!'"),
        numbers.map(lambda x: f"{x} IS NULL"),
        names.map(lambda x: f"{x} IS NOT NULL"),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            inner.map(lambda x: f"NOT ({x})"),
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]}) {t[1]} ({t[2]})"
            ),
        ),
        max_leaves=8,
    )


_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers().map(lambda i: i * 10**400),
    st.floats(),  # NaN and infinities included
    st.text(max_size=5),
    st.integers(-128, 127).map(Byte),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.floats(width=32).map(Float),
)
_properties = st.dictionaries(st.sampled_from(["a", "b", "c"]), _values, max_size=3)


@settings(max_examples=400)
@given(_selectors(), _properties)
def test_a_valid_selector_never_raises_on_any_properties(
    selector: str, properties: dict[str, PropertyValue]
) -> None:
    sel = compile_selector(selector)
    negation = compile_selector(f"NOT ({selector})")
    m = msg(**properties)
    result = sel.evaluate(m)  # evaluate() has no safety net: it raises if a closure does
    assert result in (True, False, None)
    assert sel.matches(m) is (result is True)
    assert negation.evaluate(m) is (None if result is None else not result)


# -- Java's numeric promotion (JLS §5.6.2) ---------------------------------------------------


def test_an_integer_divided_by_an_integer_truncates_as_java_does() -> None:
    # the selector DropboxMQ users run: every third message, as Java computes it
    sel = compile_selector("n / 3 * 3 = n")
    for value in (Int(7), Long(7), Short(7), Byte(7), 7):
        assert not sel.matches(msg(n=value)), type(value)
    chosen = [n for n in range(1, 278) if sel.matches(msg(n=Int(n)))]
    assert len(chosen) == 92  # 3, 6, ..., 276: one in three, not all 277
    assert all(n % 3 == 0 for n in chosen)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("n / 2 = 3", True),
        ("-n / 2 = -3", True),  # toward zero, not floor (-4)
        ("n / -2 = -3", True),
        ("-n / -2 = 3", True),
        ("n / 2.0 = 3.5", True),
        ("n / f = 3.5", True),  # a JMS float makes it floating point
        ("f / 0 > 1000000", True),  # a double by zero: Infinity, as in Java
        ("-f / 0 < -1000000", True),
        ("(f - f) / 0 = (f - f) / 0", False),  # NaN equals nothing
        ("i * 2 = -2", True),  # int * int wraps at 32 bits: 2147483647 * 2
        ("i + 1 = -2147483648", True),
        ("l + 1 = -9223372036854775808", True),  # long wraps at 64 bits
        ("i * 2 = 4294967294", False),
        ("li * 2 = 4294967294", True),  # a long property keeps 64 bits
        ("i * 4294967296 = 9223372032559808512", True),  # a literal past an int is a long
        ("-min = min", True),  # -Integer.MIN_VALUE overflows back to itself
        ("min / -1 = min", True),
        ("JMSPriority * 1000000000 = -1589934592", True),  # JMSPriority is an int
        ("JMSTimestamp * 1000 > 0", True),  # JMSTimestamp is a long
    ],
)
def test_arithmetic_follows_javas_numeric_promotion(selector: str, expected: bool) -> None:
    message = Message(
        b"",
        priority=7,
        timestamp=1_700_000_000_000,
        properties={
            "n": Int(7),
            "f": Float(2.0),
            "i": Int(2**31 - 1),
            "li": Long(2**31 - 1),
            "l": Long(2**63 - 1),
            "min": Int(-(2**31)),
        },
    )
    assert compile_selector(selector).evaluate(message) is expected, selector


def test_an_integer_divided_by_zero_is_unknown_and_never_raises() -> None:
    sel = compile_selector("n / d = 0")
    assert sel.evaluate(msg(n=Int(7), d=Int(0))) is None
    assert sel.evaluate(msg(n=Long(7), d=Long(0))) is None
    assert compile_selector("NOT (n / d = 0)").evaluate(msg(n=Int(7), d=Int(0))) is None
    assert compile_selector("n / d IS NULL").matches(msg(n=Int(7), d=Int(0)))
