"""Selector lexer: text in, a list of :class:`Token` out, or :class:`InvalidSelector`.

Theory of operation: one left-to-right pass over the text with an index, no
regular expressions and no backtracking, so the cost is linear in the length
of the selector. Each token records the offset where it starts, which every
later error message (lexer, parser or type checker) turns into a column with
:func:`describe_position`. The token list always ends with one ``EOF`` token.

The vocabulary is JMS 1.1 §3.8.1.1, as ActiveMQ and Artemis read it:

- string literals in single quotes, ``''`` standing for one quote;
- exact numerics: decimal (an optional ``L`` suffix is accepted, as in Java),
  hexadecimal ``0x1F`` and octal ``017``; approximate numerics: ``1.5``, ``7.``,
  ``.5``, ``1e3``, ``1.5E-2``. Signs are operators, not part of the literal;
- identifiers by Java's rules (a letter, ``_`` or ``$``, then letters, digits,
  ``_`` or ``$``), case-sensitive;
- keywords, case-insensitive and never identifiers: NOT AND OR BETWEEN LIKE IN
  IS NULL TRUE FALSE ESCAPE;
- operators ``= <> < <= > >= + - * / ( ) ,``.

Comments (an ActiveMQ extension) are not part of the language.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from chute.errors import InvalidSelector


class TokenKind(enum.Enum):
    """What a token is. Keywords get one kind each so the parser can match on them."""

    IDENT = "identifier"
    STRING = "string"
    INTEGER = "integer"
    FLOAT = "number"
    # keywords
    NOT = "NOT"
    AND = "AND"
    OR = "OR"
    BETWEEN = "BETWEEN"
    LIKE = "LIKE"
    IN = "IN"
    IS = "IS"
    NULL = "NULL"
    TRUE = "TRUE"
    FALSE = "FALSE"
    ESCAPE = "ESCAPE"
    # operators and punctuation
    EQ = "="
    NE = "<>"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    PLUS = "+"
    MINUS = "-"
    STAR = "*"
    SLASH = "/"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    EOF = "end of selector"


KEYWORDS: Final[dict[str, TokenKind]] = {
    kind.value: kind
    for kind in (
        TokenKind.NOT,
        TokenKind.AND,
        TokenKind.OR,
        TokenKind.BETWEEN,
        TokenKind.LIKE,
        TokenKind.IN,
        TokenKind.IS,
        TokenKind.NULL,
        TokenKind.TRUE,
        TokenKind.FALSE,
        TokenKind.ESCAPE,
    )
}

_ONE_CHAR: Final[dict[str, TokenKind]] = {
    "=": TokenKind.EQ,
    "<": TokenKind.LT,
    ">": TokenKind.GT,
    "+": TokenKind.PLUS,
    "-": TokenKind.MINUS,
    "*": TokenKind.STAR,
    "/": TokenKind.SLASH,
    "(": TokenKind.LPAREN,
    ")": TokenKind.RPAREN,
    ",": TokenKind.COMMA,
}
_TWO_CHAR: Final[dict[str, TokenKind]] = {
    "<>": TokenKind.NE,
    "<=": TokenKind.LE,
    ">=": TokenKind.GE,
}
# Operators from other languages, rejected with a pointer to the JMS spelling.
_FOREIGN: Final[dict[str, str]] = {
    "!=": "'<>'",
    "==": "'='",
    "&&": "AND",
    "||": "OR",
}
_WHITESPACE: Final = frozenset(" \t\n\r\f")
_DIGITS: Final = frozenset("0123456789")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS: Final = frozenset("01234567")


@dataclass(frozen=True, slots=True)
class Token:
    """One token. ``value`` is the decoded literal (str, int or float) or the identifier."""

    kind: TokenKind
    text: str
    pos: int
    value: str | int | float | None = None

    def describe(self) -> str:
        """How an error message names this token: ``')'``, ``identifier 'x'``, ..."""
        if self.kind is TokenKind.EOF:
            return "end of selector"
        if self.kind is TokenKind.IDENT:
            return f"identifier {self.text!r}"
        if self.kind is TokenKind.STRING:
            return f"string {self.text}"
        if self.kind in (TokenKind.INTEGER, TokenKind.FLOAT):
            return f"number {self.text}"
        if self.text.upper() in KEYWORDS:
            return self.text.upper()
        return repr(self.text)


def describe_position(text: str, pos: int) -> str:
    """``column N`` (1-based) for a one-line selector, ``line L, column C`` otherwise."""
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    if line == 1 and "\n" not in text:
        return f"column {column}"
    return f"line {line}, column {column}"


def error(text: str, pos: int, problem: str) -> InvalidSelector:
    """An :class:`InvalidSelector` that says what is wrong and where."""
    return InvalidSelector(f"invalid selector: {problem} at {describe_position(text, pos)}")


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch in {"_", "$"}


def _is_ident_part(ch: str) -> bool:
    return ch.isalpha() or ch.isdecimal() or ch in {"_", "$"}


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an ``EOF`` token.

    Raises:
        InvalidSelector: an unterminated string, a malformed number or a
            character that cannot start a token.
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
        elif ch == "'":
            i = _string(text, i, tokens)
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _number(text, i, tokens)
        elif _is_ident_start(ch):
            start = i
            i += 1
            while i < n and _is_ident_part(text[i]):
                i += 1
            word = text[start:i]
            kind = KEYWORDS.get(word.upper(), TokenKind.IDENT)
            tokens.append(Token(kind, word, start, word if kind is TokenKind.IDENT else None))
        else:
            pair = text[i : i + 2]
            if pair in _TWO_CHAR:
                tokens.append(Token(_TWO_CHAR[pair], pair, i))
                i += 2
            elif pair in _FOREIGN:
                raise error(text, i, f"{pair!r} is not a selector operator (use {_FOREIGN[pair]})")
            elif ch in _ONE_CHAR:
                tokens.append(Token(_ONE_CHAR[ch], ch, i))
                i += 1
            elif ch == '"':
                raise error(text, i, "string literals use single quotes ('...'), not double quotes")
            else:
                raise error(text, i, f"unexpected character {ch!r}")
    tokens.append(Token(TokenKind.EOF, "", n))
    return tokens


def _string(text: str, start: int, tokens: list[Token]) -> int:
    """Scan a quoted string starting at ``start``; returns the index after it."""
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find("'", i)
        if end < 0:
            raise error(text, start, "string literal is not closed (missing ')")
        parts.append(text[i:end])
        if text.startswith("''", end):  # an escaped quote
            parts.append("'")
            i = end + 2
        else:
            tokens.append(Token(TokenKind.STRING, text[start : end + 1], start, "".join(parts)))
            return end + 1


def _number(text: str, start: int, tokens: list[Token]) -> int:
    """Scan a numeric literal starting at ``start``; returns the index after it."""
    end, value = _scan_number(text, start)
    # "12abc" or "1.5.2" is a typo, not two tokens: say so rather than fail later.
    if end < len(text) and (_is_ident_part(text[end]) or text[end] == "."):
        stop = end
        while stop < len(text) and (_is_ident_part(text[stop]) or text[stop] == "."):
            stop += 1
        raise error(text, start, f"malformed number {text[start:stop]!r}")
    kind = TokenKind.FLOAT if isinstance(value, float) else TokenKind.INTEGER
    tokens.append(Token(kind, text[start:end], start, value))
    return end


def _scan_number(text: str, start: int) -> tuple[int, int | float]:
    n = len(text)
    i = start
    if text.startswith(("0x", "0X"), i):
        i += 2
        while i < n and text[i] in _HEX_DIGITS:
            i += 1
        if i == start + 2:
            raise error(text, start, "hexadecimal literal needs digits after 0x")
        return i, _to_int(text, start, text[start + 2 : i], 16)
    while i < n and text[i] in _DIGITS:
        i += 1
    is_float = False
    if i < n and text[i] == ".":
        is_float = True
        i += 1
        while i < n and text[i] in _DIGITS:
            i += 1
    if i < n and text[i] in "eE":
        is_float = True
        i += 1
        if i < n and text[i] in "+-":
            i += 1
        digits_start = i
        while i < n and text[i] in _DIGITS:
            i += 1
        if i == digits_start:
            raise error(text, start, "exponent needs digits after E")
    literal = text[start:i]
    if is_float:
        return i, float(literal)
    if i < n and text[i] in "lL":  # Java long suffix
        i += 1
    if literal.startswith("0") and len(literal) > 1:
        if not set(literal) <= _OCTAL_DIGITS:
            raise error(text, start, f"invalid octal literal {literal} (digits 0-7 only)")
        return i, _to_int(text, start, literal, 8)
    return i, _to_int(text, start, literal, 10)


def _to_int(text: str, start: int, digits: str, base: int) -> int:
    try:
        return int(digits, base)
    except ValueError:  # only past Python's 4300-digit conversion limit
        raise error(text, start, "numeric literal is too long") from None
