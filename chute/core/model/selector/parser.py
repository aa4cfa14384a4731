"""Selector parser: tokens in, a small typed syntax tree out, or :class:`InvalidSelector`.

Theory of operation. The grammar is JMS 1.1 §3.8.1.1 with SQL's precedence,
loosest first::

    OR  <  AND  <  NOT  <  comparison  <  + -  <  * /  <  unary + -

where a *comparison* is one of ``= <> < <= > >=``, ``[NOT] BETWEEN a AND b``,
``[NOT] IN ('s', ...)``, ``[NOT] LIKE 'p' [ESCAPE 'c']`` and ``IS [NOT] NULL``.
Comparisons do not chain (``a = b = c`` is an error; parenthesise instead).

It is a Pratt (precedence-climbing) parser: :meth:`_Parser.expression` reads one
operand, then keeps folding infix operators into it while they bind tighter
than its caller's. That costs one Python frame pair per nesting level rather
than one per precedence level, so the nesting guard below keeps recursion far
from Python's limit. Runs of the same associative operator are collected into
one n-ary node (``a AND b AND c`` is one :class:`And`; ``a - b + c`` is one
:class:`Arithmetic`), so a long flat selector makes a shallow tree.

Hostile input is bounded twice: parser recursion (every nested operand, every
parenthesis) and the depth of the finished tree are each limited to
:data:`MAX_DEPTH`; the text itself to :data:`MAX_LENGTH` characters.

Types are checked here, statically, wherever the answer is already known: a
literal, an arithmetic result, a comparison and a JMS header have a known
:class:`Type`; a property does not (:attr:`Type.ANY`) and is left to the
evaluator. So ``JMSPriority > 'high'``, ``NOT 5`` or ``'a' + 1`` are rejected
with a message, as ActiveMQ rejects literal strings in ``<``, while
``size > 5`` is accepted whatever ``size`` turns out to hold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, TypeAlias, cast

from chute.core.model.selector.lexer import Token, TokenKind, describe_position, error, tokenize
from chute.errors import InvalidSelector

MAX_LENGTH: Final = 4096
MAX_DEPTH: Final = 100


class Type(enum.Enum):
    """What an expression yields, as far as the parser can tell."""

    BOOLEAN = "a boolean"
    NUMBER = "a number"
    STRING = "a string"
    ANY = "a property"  # known only when a message is evaluated


HEADER_TYPES: Final[dict[str, Type]] = {
    "JMSMessageID": Type.STRING,
    "JMSPriority": Type.NUMBER,
    "JMSTimestamp": Type.NUMBER,
    "JMSCorrelationID": Type.STRING,
    "JMSType": Type.STRING,
    "JMSDeliveryMode": Type.STRING,
    "JMSExpiration": Type.NUMBER,
    "JMSRedelivered": Type.BOOLEAN,
    "JMSXDeliveryCount": Type.NUMBER,
    "JMSReplyTo": Type.STRING,
}


@dataclass(frozen=True, slots=True)
class _Node:
    """Every node records the offset of its first character (``pos``) and the
    depth of its subtree (``depth``, worked out from the children on creation).
    Both are kept out of equality, so that tests can compare trees."""

    pos: int = field(default=0, compare=False, repr=False, kw_only=True)
    depth: int = field(default=1, init=False, compare=False, repr=False)

    def children(self) -> tuple[Node, ...]:
        return ()

    def __post_init__(self) -> None:
        depth = 1 + max((child.depth for child in self.children()), default=0)
        object.__setattr__(self, "depth", depth)


@dataclass(frozen=True, slots=True)
class Constant(_Node):
    value: bool | int | float | str


@dataclass(frozen=True, slots=True)
class Identifier(_Node):
    name: str


@dataclass(frozen=True, slots=True)
class Sign(_Node):
    """Unary ``+`` or ``-`` applied to a non-literal (literals are folded)."""

    op: str
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Arithmetic(_Node):
    """``first op1 x1 op2 x2 ...`` evaluated left to right; ops all ``+ -`` or all ``* /``."""

    first: Node
    rest: tuple[tuple[str, Node], ...]

    def children(self) -> tuple[Node, ...]:
        return (self.first, *(node for _, node in self.rest))


@dataclass(frozen=True, slots=True)
class Comparison(_Node):
    op: str  # one of = <> < <= > >=
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class Between(_Node):
    operand: Node
    low: Node
    high: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.low, self.high)


@dataclass(frozen=True, slots=True)
class In(_Node):
    operand: Node
    values: tuple[str, ...]
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Like(_Node):
    operand: Node
    pattern: str
    escape: str | None = None
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class IsNull(_Node):
    operand: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Not(_Node):
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class And(_Node):
    operands: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.operands


@dataclass(frozen=True, slots=True)
class Or(_Node):
    operands: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.operands


Node: TypeAlias = (
    Constant
    | Identifier
    | Sign
    | Arithmetic
    | Comparison
    | Between
    | In
    | Like
    | IsNull
    | Not
    | And
    | Or
)


def static_type(node: Node) -> Type:
    """The type ``node`` yields, or :attr:`Type.ANY` when only a message can tell."""
    if isinstance(node, Constant):
        if isinstance(node.value, bool):
            return Type.BOOLEAN
        return Type.STRING if isinstance(node.value, str) else Type.NUMBER
    if isinstance(node, Identifier):
        return HEADER_TYPES.get(node.name, Type.ANY)
    if isinstance(node, Sign | Arithmetic):
        return Type.NUMBER
    return Type.BOOLEAN


# Binding powers: an infix operator is folded in while it binds tighter than the caller.
_OR_BP: Final = 1
_AND_BP: Final = 2
_NOT_BP: Final = 3
_CMP_BP: Final = 4
_ADD_BP: Final = 5
_MUL_BP: Final = 6
_UNARY_BP: Final = 7

_INFIX_BP: Final[dict[TokenKind, int]] = {
    TokenKind.OR: _OR_BP,
    TokenKind.AND: _AND_BP,
    **dict.fromkeys(
        (
            TokenKind.EQ,
            TokenKind.NE,
            TokenKind.LT,
            TokenKind.LE,
            TokenKind.GT,
            TokenKind.GE,
            TokenKind.BETWEEN,
            TokenKind.IN,
            TokenKind.LIKE,
            TokenKind.IS,
            TokenKind.NOT,  # a NOT BETWEEN / NOT IN / NOT LIKE
        ),
        _CMP_BP,
    ),
    TokenKind.PLUS: _ADD_BP,
    TokenKind.MINUS: _ADD_BP,
    TokenKind.STAR: _MUL_BP,
    TokenKind.SLASH: _MUL_BP,
}
_COMPARISONS: Final = frozenset(
    {TokenKind.EQ, TokenKind.NE, TokenKind.LT, TokenKind.LE, TokenKind.GT, TokenKind.GE}
)


def parse(text: str) -> Node:
    """Parse a selector into its syntax tree; the root is always boolean-valued.

    Raises:
        InvalidSelector: the text is empty, too long, too deeply nested, not
            valid selector syntax, or mixes types in a way that can never match.
    """
    if len(text) > MAX_LENGTH:
        raise InvalidSelector(
            f"invalid selector: {len(text)} characters long, the limit is {MAX_LENGTH}"
        )
    if not text.strip():
        raise InvalidSelector(
            "invalid selector: it is empty (omit the selector to get every message)"
        )
    return _Parser(text).parse()


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = tokenize(text)
        self._i = 0
        self._nesting = 0

    def parse(self) -> Node:
        node = self.expression(0)
        tok = self._peek()
        if tok.kind is TokenKind.RPAREN:
            raise self._error(tok, "')' has no matching '('")
        if tok.kind is not TokenKind.EOF:
            raise self._unexpected(tok, "an operator or the end of the selector")
        self._require(node, Type.BOOLEAN, "the selector as a whole")
        return node

    # -- token helpers ---------------------------------------------------------------

    def _peek(self) -> Token:
        return self._tokens[self._i]

    def _next(self) -> Token:
        tok = self._tokens[self._i]
        if tok.kind is not TokenKind.EOF:
            self._i += 1
        return tok

    def _expect(self, kind: TokenKind, expected: str) -> Token:
        tok = self._next()
        if tok.kind is not kind:
            raise self._unexpected(tok, expected)
        return tok

    def _error(self, tok: Token, problem: str) -> InvalidSelector:
        return error(self._text, tok.pos, problem)

    def _unexpected(self, tok: Token, expected: str) -> InvalidSelector:
        return self._error(tok, f"expected {expected} but found {tok.describe()}")

    def _require(self, node: Node, wanted: Type, role: str) -> None:
        found = static_type(node)
        if found is not Type.ANY and found is not wanted:
            raise error(self._text, node.pos, f"{role} must be {wanted.value}, not {found.value}")

    def _checked(self, node: Node) -> Node:
        if node.depth > MAX_DEPTH:
            raise error(self._text, node.pos, f"selector nests deeper than {MAX_DEPTH} levels")
        return node

    # -- grammar -----------------------------------------------------------------------

    def expression(self, min_bp: int) -> Node:
        """An operand followed by every infix operator that binds tighter than ``min_bp``."""
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            raise self._error(self._peek(), f"selector nests deeper than {MAX_DEPTH} levels")
        left = self._prefix(min_bp)
        compared = False
        while True:
            tok = self._peek()
            bp = _INFIX_BP.get(tok.kind)
            if bp is None or bp <= min_bp:
                break
            if bp == _CMP_BP and compared:
                raise self._error(tok, "comparisons cannot be chained (add parentheses)")
            compared = bp == _CMP_BP
            left = self._checked(self._infix(left, self._next(), bp))
        self._nesting -= 1
        return left

    def _prefix(self, min_bp: int) -> Node:
        tok = self._next()
        kind = tok.kind
        if kind is TokenKind.IDENT:
            return Identifier(tok.text, pos=tok.pos)
        if kind in (TokenKind.STRING, TokenKind.INTEGER, TokenKind.FLOAT):
            return Constant(cast(str | int | float, tok.value), pos=tok.pos)
        if kind in (TokenKind.TRUE, TokenKind.FALSE):
            return Constant(kind is TokenKind.TRUE, pos=tok.pos)
        if kind is TokenKind.LPAREN:
            inner = self.expression(0)
            closing = self._peek()
            if closing.kind is not TokenKind.RPAREN:
                opened = describe_position(self._text, tok.pos)
                raise self._unexpected(closing, f"')' to close the '(' at {opened}")
            self._next()
            return inner
        if kind is TokenKind.NOT:
            if min_bp > _NOT_BP:
                raise self._error(tok, "NOT cannot be used here without parentheses")
            operand = self.expression(_NOT_BP)
            self._require(operand, Type.BOOLEAN, "the operand of NOT")
            return self._checked(Not(operand, pos=tok.pos))
        if kind in (TokenKind.PLUS, TokenKind.MINUS):
            operand = self.expression(_UNARY_BP)
            self._require(operand, Type.NUMBER, f"the operand of unary '{tok.text}'")
            if isinstance(operand, Constant) and not isinstance(operand.value, bool | str):
                value = -operand.value if kind is TokenKind.MINUS else operand.value
                return Constant(value, pos=tok.pos)
            return self._checked(Sign(tok.text, operand, pos=tok.pos))
        if kind is TokenKind.NULL:
            raise self._error(tok, "NULL can only be tested with IS NULL or IS NOT NULL")
        raise self._unexpected(tok, "a property, a literal, '(' or NOT")

    def _infix(self, left: Node, tok: Token, bp: int) -> Node:
        kind = tok.kind
        if kind in (TokenKind.AND, TokenKind.OR):
            name = kind.value
            self._require(left, Type.BOOLEAN, f"the left operand of {name}")
            right = self.expression(bp)
            self._require(right, Type.BOOLEAN, f"the right operand of {name}")
            cls = And if kind is TokenKind.AND else Or
            operands = left.operands if isinstance(left, cls) else (left,)
            return cls((*operands, right), pos=left.pos)
        if bp in (_ADD_BP, _MUL_BP):
            self._require(left, Type.NUMBER, f"the left operand of '{tok.text}'")
            right = self.expression(bp)
            self._require(right, Type.NUMBER, f"the right operand of '{tok.text}'")
            group = "+-" if bp == _ADD_BP else "*/"
            if isinstance(left, Arithmetic) and left.rest[0][0] in group:
                return Arithmetic(left.first, (*left.rest, (tok.text, right)), pos=left.pos)
            return Arithmetic(left, ((tok.text, right),), pos=left.pos)
        if kind in _COMPARISONS:
            right = self.expression(bp)
            self._check_comparison(tok, left, right)
            return Comparison(tok.text, left, right, pos=left.pos)
        if kind is TokenKind.IS:
            negated = self._peek().kind is TokenKind.NOT
            if negated:
                self._next()
            self._expect(TokenKind.NULL, "NULL after IS NOT" if negated else "NULL or NOT after IS")
            return IsNull(left, negated, pos=left.pos)
        negated = kind is TokenKind.NOT
        if negated:
            tok = self._next()
            kind = tok.kind
        if kind is TokenKind.BETWEEN:
            return self._between(left, tok, negated)
        if kind is TokenKind.IN:
            return self._in(left, negated)
        if kind is TokenKind.LIKE:
            return self._like(left, negated)
        raise self._unexpected(tok, "BETWEEN, IN or LIKE after NOT")

    def _check_comparison(self, tok: Token, left: Node, right: Node) -> None:
        if tok.kind in (TokenKind.EQ, TokenKind.NE):
            lt, rt = static_type(left), static_type(right)
            if Type.ANY not in (lt, rt) and lt is not rt:
                raise error(
                    self._text,
                    tok.pos,
                    f"'{tok.text}' compares {lt.value} with {rt.value}, which can never match",
                )
            return
        self._require(left, Type.NUMBER, f"the left operand of '{tok.text}'")
        self._require(right, Type.NUMBER, f"the right operand of '{tok.text}'")

    def _between(self, left: Node, tok: Token, negated: bool) -> Node:
        self._require(left, Type.NUMBER, "the operand of BETWEEN")
        low = self.expression(_CMP_BP)
        self._require(low, Type.NUMBER, "the lower bound of BETWEEN")
        self._expect(TokenKind.AND, "AND between the bounds of BETWEEN")
        high = self.expression(_CMP_BP)
        self._require(high, Type.NUMBER, "the upper bound of BETWEEN")
        return Between(left, low, high, negated, pos=left.pos)

    def _in(self, left: Node, negated: bool) -> Node:
        self._require(left, Type.STRING, "the operand of IN")
        self._expect(TokenKind.LPAREN, "'(' after IN")
        values = [self._string("a string literal in the IN list")]
        while self._peek().kind is TokenKind.COMMA:
            self._next()
            values.append(self._string("a string literal after ',' in the IN list"))
        self._expect(TokenKind.RPAREN, "',' or ')' in the IN list")
        return In(left, tuple(values), negated, pos=left.pos)

    def _like(self, left: Node, negated: bool) -> Node:
        self._require(left, Type.STRING, "the operand of LIKE")
        pattern_tok = self._peek()
        pattern = self._string("a string literal pattern after LIKE")
        escape: str | None = None
        if self._peek().kind is TokenKind.ESCAPE:
            self._next()
            escape_tok = self._peek()
            escape = self._string("a string literal after ESCAPE")
            if len(escape) != 1:
                raise self._error(
                    escape_tok,
                    f"the ESCAPE string must be exactly one character, not {escape_tok.text}",
                )
            i = 0
            while i < len(pattern):
                if pattern[i] == escape:
                    if i + 1 == len(pattern):
                        raise self._error(
                            pattern_tok, "LIKE pattern ends with its ESCAPE character"
                        )
                    i += 1
                i += 1
        return Like(left, pattern, escape, negated, pos=left.pos)

    def _string(self, expected: str) -> str:
        return cast(str, self._expect(TokenKind.STRING, expected).value)
