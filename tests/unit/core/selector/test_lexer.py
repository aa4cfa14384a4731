"""The selector lexer: tokens, literal values, positions and lexical errors."""

from __future__ import annotations

import pytest

from chute.core.model.selector.lexer import Token, TokenKind, describe_position, tokenize
from chute.errors import InvalidSelector

K = TokenKind


def kinds(text: str) -> list[TokenKind]:
    return [tok.kind for tok in tokenize(text)]


def values(text: str) -> list[object]:
    return [tok.value for tok in tokenize(text)[:-1]]


def test_a_typical_selector() -> None:
    tokens = tokenize("region = 'eu' AND JMSPriority > 5")
    assert [(t.kind, t.text, t.pos, t.value) for t in tokens] == [
        (K.IDENT, "region", 0, "region"),
        (K.EQ, "=", 7, None),
        (K.STRING, "'eu'", 9, "eu"),
        (K.AND, "AND", 14, None),
        (K.IDENT, "JMSPriority", 18, "JMSPriority"),
        (K.GT, ">", 30, None),
        (K.INTEGER, "5", 32, 5),
        (K.EOF, "", 33, None),
    ]


@pytest.mark.parametrize("text", ["", "   ", " \t\r\n\f "])
def test_blank_text_is_only_eof(text: str) -> None:
    assert tokenize(text) == [Token(K.EOF, "", len(text))]


def test_every_operator() -> None:
    assert kinds("= <> < <= > >= + - * / ( ) ,") == [
        K.EQ, K.NE, K.LT, K.LE, K.GT, K.GE, K.PLUS, K.MINUS, K.STAR, K.SLASH,
        K.LPAREN, K.RPAREN, K.COMMA, K.EOF,
    ]  # fmt: skip


def test_operators_need_no_spaces() -> None:
    assert kinds("a<>b") == [K.IDENT, K.NE, K.IDENT, K.EOF]
    assert kinds("(a>=1)") == [K.LPAREN, K.IDENT, K.GE, K.INTEGER, K.RPAREN, K.EOF]
    assert kinds("a<=-1") == [K.IDENT, K.LE, K.MINUS, K.INTEGER, K.EOF]


@pytest.mark.parametrize(
    "word", ["NOT", "and", "Or", "between", "LIKE", "in", "Is", "null", "TRUE", "false", "eScApE"]
)
def test_keywords_are_case_insensitive(word: str) -> None:
    (tok, _) = tokenize(word)
    assert tok.kind is TokenKind(word.upper())
    assert tok.value is None


@pytest.mark.parametrize(
    "name",
    ["a", "Region", "_x", "$y", "a1_$", "JMSPriority", "ANDY", "order", "INx", "été", "NULLS"],
)
def test_identifiers(name: str) -> None:
    (tok, _) = tokenize(name)
    assert (tok.kind, tok.value) == (K.IDENT, name)


def test_identifiers_are_case_sensitive() -> None:
    assert values("abc ABC Abc") == ["abc", "ABC", "Abc"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("''", ""),
        ("'eu'", "eu"),
        ("'it''s'", "it's"),
        ("''''", "'"),
        ("'a''''b'", "a''b"),
        ("'%_\\'", "%_\\"),
        ("'two\nlines'", "two\nlines"),
        ("'AND'", "AND"),
        ("'héllo ✓'", "héllo ✓"),
    ],
)
def test_string_literals(text: str, value: str) -> None:
    (tok, _) = tokenize(text)
    assert (tok.kind, tok.value, tok.text) == (K.STRING, value, text)


def test_adjacent_strings_are_two_tokens() -> None:
    assert values("'a' 'b'") == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("0", K.INTEGER, 0),
        ("57", K.INTEGER, 57),
        ("9223372036854775807", K.INTEGER, 9223372036854775807),
        ("123456789012345678901234567890", K.INTEGER, 123456789012345678901234567890),
        ("42L", K.INTEGER, 42),
        ("42l", K.INTEGER, 42),
        ("0x1F", K.INTEGER, 31),
        ("0XfF", K.INTEGER, 255),
        ("017", K.INTEGER, 15),
        ("00", K.INTEGER, 0),
        ("1.5", K.FLOAT, 1.5),
        ("7.", K.FLOAT, 7.0),
        (".5", K.FLOAT, 0.5),
        ("1e3", K.FLOAT, 1000.0),
        ("7E3", K.FLOAT, 7000.0),
        ("1.5E-2", K.FLOAT, 0.015),
        ("57.9e+2", K.FLOAT, 5790.0),
        ("09.5", K.FLOAT, 9.5),
        ("1e999", K.FLOAT, float("inf")),
    ],
)
def test_numeric_literals(text: str, kind: TokenKind, value: float) -> None:
    (tok, _) = tokenize(text)
    assert (tok.kind, tok.value, tok.text) == (kind, value, text)
    assert type(tok.value) is (int if kind is K.INTEGER else float)


def test_a_sign_is_an_operator_not_part_of_the_number() -> None:
    assert kinds("-5") == [K.MINUS, K.INTEGER, K.EOF]
    assert kinds("1-2") == [K.INTEGER, K.MINUS, K.INTEGER, K.EOF]
    assert kinds("1e-2-3") == [K.FLOAT, K.MINUS, K.INTEGER, K.EOF]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a = 'eu", "string literal is not closed (missing ') at column 5"),
        ("'it''s", "string literal is not closed"),
        ('a = "eu"', "single quotes"),
        ("a != 1", "'!=' is not a selector operator (use '<>') at column 3"),
        ("a == 1", "(use '=')"),
        ("a = 1 && b", "(use AND)"),
        ("a = 1 || b", "(use OR)"),
        ("a % 2", "unexpected character '%' at column 3"),
        ("a = 1;", "unexpected character ';' at column 6"),
        ("a = @", "unexpected character '@'"),
        ("a = 12abc", "malformed number '12abc' at column 5"),
        ("a = 1.5.2", "malformed number '1.5.2'"),
        ("a = 1e", "exponent needs digits after E at column 5"),
        ("a = 1.5e+", "exponent needs digits"),
        ("a = 0x", "hexadecimal literal needs digits after 0x"),
        ("a = 0x1G", "malformed number '0x1G'"),
        ("a = 08", "invalid octal literal 08"),
        ("a = 1.5L", "malformed number '1.5L'"),
        ("a = 5AND b", "malformed number '5AND'"),
    ],
)
def test_lexical_errors_say_what_and_where(text: str, message: str) -> None:
    with pytest.raises(InvalidSelector, match="invalid selector") as info:
        tokenize(text)
    assert message in str(info.value)


def test_a_number_beyond_pythons_conversion_limit_is_an_error() -> None:
    with pytest.raises(InvalidSelector, match="numeric literal is too long at column 1"):
        tokenize("9" * 5000)


def test_error_position_counts_lines_in_a_multi_line_selector() -> None:
    with pytest.raises(InvalidSelector, match="line 2, column 7"):
        tokenize("a = 1\nAND b ! 2")


@pytest.mark.parametrize(
    ("text", "pos", "where"),
    [
        ("abc", 0, "column 1"),
        ("abc", 3, "column 4"),
        ("a\nbc", 0, "line 1, column 1"),
        ("a\nbc", 3, "line 2, column 2"),
        ("a\n\nbc", 3, "line 3, column 1"),
    ],
)
def test_describe_position(text: str, pos: int, where: str) -> None:
    assert describe_position(text, pos) == where


@pytest.mark.parametrize(
    ("text", "described"),
    [
        ("", "end of selector"),
        ("abc", "identifier 'abc'"),
        ("'x'", "string 'x'"),
        ("1.5", "number 1.5"),
        ("and", "AND"),
        ("<>", "'<>'"),
    ],
)
def test_tokens_describe_themselves_for_error_messages(text: str, described: str) -> None:
    assert tokenize(text)[0].describe() == described


def test_eof_is_last_and_positions_increase() -> None:
    text = "a BETWEEN -1.5 AND 0x10 OR b IN ('x', 'y''z') OR c LIKE '%' ESCAPE '!'"
    tokens = tokenize(text)
    assert tokens[-1] == Token(K.EOF, "", len(text))
    assert [t.pos for t in tokens] == sorted({t.pos for t in tokens})
    assert all(text[t.pos : t.pos + len(t.text)] == t.text for t in tokens)
