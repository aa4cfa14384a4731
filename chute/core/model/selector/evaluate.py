"""Selector evaluation: the syntax tree compiled once into a tree of closures.

Theory of operation. :func:`compile_selector` parses the text, then
:func:`_compile` walks the tree once and returns, for each node, a closure
``fn(message) -> value``. Everything that can be decided at compile time is:
which header or property an identifier reads, which operator function to call,
which side of a comparison is a literal (it is bound into the closure, and
literals are moved to the right), the ``frozenset`` of an IN list, and the
matcher of a LIKE pattern. ``Selector.matches`` is then one call into that
tree: no parsing, no dispatch on node types, no per-message allocation beyond
the values themselves.

Values are ``None`` (SQL's NULL / *unknown*), ``bool``, ``int``, ``float`` or
``str``; the int and float subclasses of :mod:`chute.message` (``Byte``,
``Short``, ``Int``, ``Long``, ``Float``) are plain numbers here, except that
arithmetic keeps Java's ``int`` and ``long`` apart (:mod:`.arithmetic`). The rules, JMS
1.1 §3.8.1.2 as ActiveMQ and Artemis apply them:

- A missing property, a ``None`` header, or arithmetic on anything but numbers
  (and an integer divided by zero) is NULL; a comparison or LIKE/IN/BETWEEN with a NULL
  operand is unknown; ``IS [NOT] NULL`` is never unknown.
- AND, OR and NOT use three-valued (Kleene) logic; a selector matches only
  when it is TRUE.
- Values of unlike types are never equal and never ordered: the comparison is
  FALSE (not unknown), and ``<>``, ``NOT LIKE``, ``NOT IN`` and ``NOT BETWEEN``,
  which are the negations of their positive forms, are then TRUE. ``bool`` is
  not a number, despite Python. ``<``, ``<=``, ``>``, ``>=`` order numbers only.
- Integers and floats compare numerically. Arithmetic is Java's (JLS §5.6.2,
  as JMS requires and ActiveMQ does): integer with integer stays an integer,
  ``int`` (byte, short and int properties, ``JMSPriority``,
  ``JMSXDeliveryCount``, literals that fit) unless either side is a ``long``
  (long properties, plain Python ints, ``JMSTimestamp``, ``JMSExpiration``,
  larger literals), wrapping around on overflow; ``/`` between integers
  truncates toward zero (``7 / 2`` is 3) and an integer divided by zero is
  NULL; with a float on either side it is a double (``7 / 2.0`` is 3.5, and a
  double divided by zero is an infinity or NaN, as in Java).

Three headers read as JMS clients see them, not as chute stores them (what
DropboxMQ's selectors do, and what its consumers read from a file):

- ``JMSMessageID`` is the id with JMS's ``ID:`` prefix: JMS requires every
  message id to start with it, so a chute id without one (a native chute id)
  is read as ``'ID:' + id`` (as Artemis does), and an id that has one (a
  message decoded from a DropboxMQ file) is read as it is.
- ``JMSReplyTo`` is the reply-to destination's plain name, ``replies`` for
  ``queue:replies`` and ``news.eu`` for ``topic:news.eu`` (JMS has no text for
  a destination; its name is what a JMS selector compares). Queue and topic
  look the same here.
- ``JMSXDeliveryCount`` is NULL on a message that has no delivery count (0:
  never delivered, a DropboxMQ file whose name has none), else the count.

Closures never raise for JMS-typed values. :meth:`Selector.matches` still
catches anything (a message built with a non-JMS property value, say), logs it
and answers False: evaluation runs on the broker's delivery path.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable
from typing import Any, Final, assert_never

from chute.core.model.selector.arithmetic import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    java_arithmetic,
    java_negation,
)
from chute.core.model.selector.like import like_matcher
from chute.core.model.selector.parser import (
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
from chute.message import Byte, Float, Int, Long, Message, Short

log = logging.getLogger("chute.selector")

# A compiled node: message in, value out (None, bool, int, float or str).
Fn = Callable[[Message], Any]


class Selector:
    """A compiled JMS message selector.

    Immutable: one instance may be shared by any number of consumers, tasks and
    threads. Build it with :func:`compile_selector`.
    """

    __slots__ = ("_fn", "_text")

    def __init__(self, text: str, fn: Fn) -> None:
        self._text = text
        self._fn = fn

    @property
    def text(self) -> str:
        """The selector as it was written."""
        return self._text

    def matches(self, message: Message) -> bool:
        """True if the selector is TRUE for ``message`` (FALSE and unknown do not match).

        Never raises.
        """
        try:
            return self._fn(message) is True
        except Exception:
            log.exception("selector %r failed on a message; treating it as no match", self._text)
            return False

    def evaluate(self, message: Message) -> bool | None:
        """The three-valued result: True, False, or None for unknown.

        Unlike :meth:`matches` this does not guard against non-JMS values.
        """
        result = self._fn(message)
        return result if result is None or isinstance(result, bool) else None

    def __repr__(self) -> str:
        return f"Selector({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self._text == other._text

    def __hash__(self) -> int:
        return hash(self._text)


def compile_selector(text: str) -> Selector:
    """Compile a JMS selector. Results are cached: the same text gives the same object.

    Raises:
        InvalidSelector: for any text that is not a valid selector (including an
            empty one; callers treat "" as "no selector" before calling), with
            the position and what was expected. Nothing else.
    """
    if not isinstance(text, str):
        raise InvalidSelector(f"invalid selector: expected a string, not {type(text).__name__}")
    return _compile_cached(text)


@functools.lru_cache(maxsize=1024)
def _compile_cached(text: str) -> Selector:
    try:
        tree = parse(text)
        fn = _compile(tree)
        if static_type(tree) is Type.ANY:  # a lone property: only a bool is TRUE or FALSE
            fn = _as_boolean(fn)
    except RecursionError:  # the depth limits should make this unreachable
        raise InvalidSelector("invalid selector: nested too deeply") from None
    return Selector(text, fn)


# -- values -------------------------------------------------------------------------------

_NUMBER_TYPES: Final = frozenset({int, float, Byte, Short, Int, Long, Float})


def _is_number(value: object) -> bool:
    """The slow path of the ``type(v) in _NUMBER_TYPES`` test inlined in closures."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _delivery_mode(message: Message) -> str:
    return "PERSISTENT" if message.persistent else "NON_PERSISTENT"


JMS_ID_PREFIX: Final = "ID:"
"""What every JMS message id starts with (JMS 1.1 §3.4.3)."""

_DESTINATION_KINDS: Final = frozenset({"queue", "topic"})


def _message_id(message: Message) -> str:
    """``JMSMessageID``: the id as a JMS client sees it, ``ID:`` prefix and all."""
    message_id = message.id
    return message_id if message_id.startswith(JMS_ID_PREFIX) else JMS_ID_PREFIX + message_id


def _reply_to(message: Message) -> str | None:
    """``JMSReplyTo``: the reply-to destination's name, without ``queue:`` or ``topic:``."""
    reply_to = message.reply_to
    if reply_to is None:
        return None
    kind, colon, name = reply_to.partition(":")
    return name if colon and kind in _DESTINATION_KINDS else reply_to


def _delivery_count(message: Message) -> int | None:
    """``JMSXDeliveryCount``: NULL (None) for a message without a count (0)."""
    return message.delivery_count or None


HEADERS: Final[dict[str, Fn]] = {
    "JMSMessageID": _message_id,
    "JMSPriority": operator.attrgetter("priority"),
    "JMSTimestamp": operator.attrgetter("timestamp"),
    "JMSCorrelationID": operator.attrgetter("correlation_id"),
    "JMSType": operator.attrgetter("type"),
    "JMSDeliveryMode": _delivery_mode,
    "JMSExpiration": operator.attrgetter("expiration"),
    "JMSRedelivered": operator.attrgetter("redelivered"),
    "JMSXDeliveryCount": _delivery_count,
    "JMSReplyTo": _reply_to,
}


def _constant(value: object) -> Fn:
    def constant(message: Message) -> Any:
        return value

    return constant


def _property(name: str) -> Fn:
    def get(message: Message) -> Any:
        return message.properties.get(name)

    return get


def _as_boolean(fn: Fn) -> Fn:
    def as_boolean(message: Message) -> Any:
        value = fn(message)
        return value if type(value) is bool else None

    return as_boolean


# -- compilation ----------------------------------------------------------------------------


def _compile(node: Node) -> Fn:
    if isinstance(node, Constant):
        return _constant(node.value)
    if isinstance(node, Identifier):
        return HEADERS.get(node.name) or _property(node.name)
    if isinstance(node, Comparison):
        return _comparison(node)
    if isinstance(node, And | Or):
        return _logical(node)
    if isinstance(node, Not):
        return _not(_compile(node.operand))
    if isinstance(node, Arithmetic):
        return _arithmetic(node)
    if isinstance(node, Sign):
        return _sign(node.op, node.operand)
    if isinstance(node, Between):
        return _between(node)
    if isinstance(node, In):
        return _in(_compile(node.operand), frozenset(node.values), node.negated)
    if isinstance(node, Like):
        return _like(_compile(node.operand), like_matcher(node.pattern, node.escape), node.negated)
    if isinstance(node, IsNull):
        return _is_null(_compile(node.operand), node.negated)
    assert_never(node)


def _logical(node: And | Or) -> Fn:
    fns = tuple(_compile(operand) for operand in node.operands)
    # AND stops at the first FALSE, OR at the first TRUE; any other non-bool is unknown.
    stop, go = (False, True) if isinstance(node, And) else (True, False)
    if len(fns) == 2:
        first, second = fns

        def pair(message: Message) -> Any:
            a = first(message)
            if a is stop:
                return stop
            b = second(message)
            if b is stop:
                return stop
            return go if a is go and b is go else None

        return pair

    def chain(message: Message) -> Any:
        result: bool | None = go
        for fn in fns:
            value = fn(message)
            if value is stop:
                return stop
            if value is not go:
                result = None
        return result

    return chain


def _not(fn: Fn) -> Fn:
    def negate(message: Message) -> Any:
        value = fn(message)
        if value is True:
            return False
        if value is False:
            return True
        return None

    return negate


_MIRROR: Final = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ORDER: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _comparison(node: Comparison) -> Fn:
    op, left, right = node.op, node.left, node.right
    if isinstance(left, Constant) and not isinstance(right, Constant):
        op, left, right = _MIRROR[op], right, left
    if isinstance(left, Identifier) and isinstance(right, Constant):
        fast = _property_comparison(left.name, op, right.value)
        if fast is not None:
            return fast
    lhs = _compile(left)
    if isinstance(right, Constant):
        if op in ("=", "<>"):
            return _equals_constant(lhs, right.value, negated=op == "<>")
        return _order_constant(_ORDER[op], lhs, right.value)
    rhs = _compile(right)
    if op in ("=", "<>"):
        return _equals(lhs, rhs, negated=op == "<>")
    return _order(_ORDER[op], lhs, rhs)


def _property_comparison(name: str, op: str, const: object) -> Fn | None:
    """``prop = 'text'``, ``prop <> 'text'``, ``prop > 5``..., the commonest shapes.

    The same as the general closures below with the property lookup inlined,
    which saves a call per message.
    """
    if name in HEADERS:
        return None
    if isinstance(const, str) and op == "=":

        def property_eq(message: Message) -> Any:
            value = message.properties.get(name)
            return None if value is None else value == const

        return property_eq
    if isinstance(const, str) and op == "<>":

        def property_ne(message: Message) -> Any:
            value = message.properties.get(name)
            return None if value is None else value != const

        return property_ne
    if op in _ORDER:
        order = _ORDER[op]

        def property_order(message: Message) -> Any:
            value = message.properties.get(name)
            if value is None:
                return None
            if type(value) in _NUMBER_TYPES or _is_number(value):
                return order(value, const)
            return False

        return property_order
    return None


def _equals_constant(lhs: Fn, const: object, *, negated: bool) -> Fn:
    if isinstance(const, bool):
        # bool cannot be subclassed, so identity is exact (and 1 is not TRUE).
        def bool_eq(message: Message) -> Any:
            value = lhs(message)
            return None if value is None else (value is const) is not negated

        return bool_eq

    def equals_constant(message: Message) -> Any:  # a number or a string
        value = lhs(message)
        if value is None:
            return None
        if type(value) is bool:
            return negated
        return (value == const) is not negated

    return equals_constant


def _equals(lhs: Fn, rhs: Fn, *, negated: bool) -> Fn:
    def equals(message: Message) -> Any:
        a = lhs(message)
        if a is None:
            return None
        b = rhs(message)
        if b is None:
            return None
        if type(a) is bool or type(b) is bool:
            return (a is b) is not negated
        return (a == b) is not negated

    return equals


def _order_constant(op: Callable[[Any, Any], Any], lhs: Fn, const: object) -> Fn:
    # The parser only lets a numeric literal reach an ordering comparison.
    def order_constant(message: Message) -> Any:
        value = lhs(message)
        if value is None:
            return None
        if type(value) in _NUMBER_TYPES or _is_number(value):
            return op(value, const)
        return False

    return order_constant


def _order(op: Callable[[Any, Any], Any], lhs: Fn, rhs: Fn) -> Fn:
    def order(message: Message) -> Any:
        a = lhs(message)
        if a is None:
            return None
        b = rhs(message)
        if b is None:
            return None
        if (type(a) in _NUMBER_TYPES or _is_number(a)) and (
            type(b) in _NUMBER_TYPES or _is_number(b)
        ):
            return op(a, b)
        return False

    return order


_INT_HEADERS: Final = frozenset({"JMSPriority", "JMSXDeliveryCount"})
"""Headers a JMS client reads as a Java ``int`` (the other numeric headers are ``long``)."""


def _number_operand(node: Node) -> Fn:
    """``node`` compiled as an operand of arithmetic, typed as Java types it: an integer
    literal is an ``int`` when it fits one (else a ``long``), and so are the ``int`` headers."""
    if isinstance(node, Constant) and type(node.value) is int:
        value = node.value
        if INT_MIN <= value <= INT_MAX:
            return _constant(Int(value))
        return _constant(Long(value) if LONG_MIN <= value <= LONG_MAX else value)
    fn = _compile(node)
    if isinstance(node, Identifier) and node.name in _INT_HEADERS:

        def int_header(message: Message) -> Any:
            value = fn(message)
            if type(value) is int and INT_MIN <= value <= INT_MAX:
                return Int(value)
            return value

        return int_header
    return fn


def _arithmetic(node: Arithmetic) -> Fn:
    first = _number_operand(node.first)
    steps = tuple((op, _number_operand(operand)) for op, operand in node.rest)

    def arithmetic(message: Message) -> Any:
        acc = first(message)
        if acc is None or not (type(acc) in _NUMBER_TYPES or _is_number(acc)):
            return None
        for op, fn in steps:
            value = fn(message)
            if value is None or not (type(value) in _NUMBER_TYPES or _is_number(value)):
                return None
            acc = java_arithmetic(op, acc, value)
            if acc is None:
                return None
        return acc

    return arithmetic


def _sign(op: str, node: Node) -> Fn:
    fn = _number_operand(node)
    minus = op == "-"

    def sign(message: Message) -> Any:
        value = fn(message)
        if value is None or not (type(value) in _NUMBER_TYPES or _is_number(value)):
            return None
        return java_negation(value) if minus else value

    return sign


def _between(node: Between) -> Fn:
    operand, negated = _compile(node.operand), node.negated
    low, high = node.low, node.high
    if isinstance(low, Constant) and isinstance(high, Constant):
        lo, hi = low.value, high.value

        def between_constants(message: Message) -> Any:
            value = operand(message)
            if value is None:
                return None
            if type(value) in _NUMBER_TYPES or _is_number(value):
                return (lo <= value <= hi) is not negated
            return negated

        return between_constants
    low_fn, high_fn = _compile(low), _compile(high)

    def between(message: Message) -> Any:
        # value >= low AND value <= high, each comparison three-valued.
        value = operand(message)
        if value is None:
            return None
        number = type(value) in _NUMBER_TYPES or _is_number(value)
        result: bool | None = True
        for bound, above in ((low_fn(message), True), (high_fn(message), False)):
            if bound is None:
                result = None
            elif (
                not number
                or not (type(bound) in _NUMBER_TYPES or _is_number(bound))
                or not (value >= bound if above else value <= bound)
            ):
                return negated
        return None if result is None else not negated

    return between


def _in(operand: Fn, values: frozenset[str], negated: bool) -> Fn:
    def in_list(message: Message) -> Any:
        value = operand(message)
        if value is None:
            return None
        if isinstance(value, str):
            return (value in values) is not negated
        return negated

    return in_list


def _like(operand: Fn, matcher: Callable[[str], bool], negated: bool) -> Fn:
    def like(message: Message) -> Any:
        value = operand(message)
        if value is None:
            return None
        if isinstance(value, str):
            return matcher(value) is not negated
        return negated

    return like


def _is_null(operand: Fn, negated: bool) -> Fn:
    def is_null(message: Message) -> Any:
        return (operand(message) is None) is not negated

    return is_null
