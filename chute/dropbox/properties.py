"""DropboxMQ's typed properties in a filename, and the numbers in its fields. Pure.

A property is written ``enc(name) + letter + "=" + enc(value)``, pairs joined
by ``&``; the letter is the JMS type (``B`` boolean, ``Y`` byte, ``H`` short,
``I`` int, ``L`` long, ``F`` float, ``D`` double, ``S`` string; an unknown
letter reads as a string), and a value is read as Java reads it
(``Integer.parseInt``, ``Float.parseFloat`` after ``String.trim``). Numbers in
the other fields (priority, id, expiration) are cut at their first ``-`` and
may start with ``+``. A property name that is not a Java identifier is not
written (DropboxMQ's reader refuses it and drops every property after it).
:mod:`chute.dropbox.transcoder` builds and reads whole names with these.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Final

from chute.dropbox.escape import dec_or_literal, enc
from chute.message import (
    MAX_PROPERTY_NAME_LENGTH,
    Byte,
    Float,
    Int,
    PropertyType,
    PropertyValue,
    Short,
    property_type,
)

DELIVERY_COUNT: Final = "JMSXDeliveryCount"
_CONTENT_TYPE: Final = "content-type"  # a STOMP header; the body kind says text or bytes
INT_MAX: Final = (1 << 31) - 1
LONG_MAX: Final = (1 << 63) - 1


# -- numbers ------------------------------------------------------------------------------

_UNSIGNED: Final = re.compile(r"\+?([0-9]{1,40})")
_SIGNED: Final = re.compile(r"[+-]?[0-9]{1,40}")
_JAVA_FLOAT: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_JAVA_BLANK: Final = "".join(chr(c) for c in range(33))  # what String.trim() removes


def dropbox_number(text: str, hi: int) -> int | None:
    """A DropboxMQ header number: cut at the first ``-``, optional ``+``, 0..hi."""
    head = text.split("-", 1)[0]
    match = _UNSIGNED.fullmatch(head)
    if match is None:
        return None
    value = int(match.group(1))
    return value if value <= hi else None


def _java_int(text: str, lo: int, hi: int) -> int | None:
    """Java's ``Long.parseLong`` and friends (ASCII digits only)."""
    if _SIGNED.fullmatch(text) is None:
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _java_float(text: str) -> float | None:
    """Java's ``Double.parseDouble`` for decimal forms (no hex floats)."""
    text = text.strip(_JAVA_BLANK)
    if _JAVA_FLOAT.fullmatch(text) is None:
        return None
    if text[-1] in "fFdD":
        text = text[:-1]
    return float(text.replace("Infinity", "inf").replace("NaN", "nan"))


def _java_float_text(value: float) -> str:
    """A double as text both Java and Python parse back to the same value."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


# -- properties ---------------------------------------------------------------------------

_TYPE_LETTERS: Final = {
    PropertyType.BOOLEAN: "B",
    PropertyType.BYTE: "Y",
    PropertyType.SHORT: "H",
    PropertyType.INT: "I",
    PropertyType.LONG: "L",
    PropertyType.FLOAT: "F",
    PropertyType.DOUBLE: "D",
    PropertyType.STRING: "S",
}
_LETTER_TYPES: Final = {v: k for k, v in _TYPE_LETTERS.items()}
_INT_TYPES: Final = {
    PropertyType.BYTE: (Byte, 8),
    PropertyType.SHORT: (Short, 16),
    PropertyType.INT: (Int, 32),
    PropertyType.LONG: (int, 64),
}


def _typed(kind: PropertyType, text: str) -> PropertyValue | None:
    """The value ``text`` holds as JMS type ``kind``, or None if it does not parse."""
    if kind is PropertyType.BOOLEAN:
        return text.lower() == "true"
    if kind is PropertyType.STRING:
        return text
    if kind in (PropertyType.FLOAT, PropertyType.DOUBLE):
        number = _java_float(text)
        if number is None:
            return None
        return Float(number) if kind is PropertyType.FLOAT else number
    wrap, bits = _INT_TYPES[kind]
    value = _java_int(text, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return None if value is None else wrap(value)


def decode_properties(text: str, notes: list[str]) -> dict[str, PropertyValue]:
    properties: dict[str, PropertyValue] = {}
    for pair in text.split("&"):
        if not pair:
            continue
        raw_key, _, raw_value = pair.partition("=")
        if not raw_key:
            notes.append(f"property {pair[:60]!r} has no name: dropped")
            continue
        kind = _LETTER_TYPES.get(raw_key[-1], PropertyType.STRING)
        name = dec_or_literal(raw_key[:-1], "property name", notes)
        if not name or len(name) > MAX_PROPERTY_NAME_LENGTH:
            notes.append(f"property {pair[:60]!r}: name must be 1-256 characters: dropped")
            continue
        value_text = dec_or_literal(raw_value, f"property {name!r} value", notes)
        value = _typed(kind, value_text)
        if value is None:
            notes.append(
                f"property {name!r}: {value_text[:40]!r} is not a {kind.name.lower()}: "
                "kept as a string"
            )
            value = value_text
        properties[name] = value  # later duplicates win
    return properties


def take_delivery_count(properties: dict[str, PropertyValue], notes: list[str]) -> int:
    if DELIVERY_COUNT not in properties:
        return 0
    value = properties.pop(DELIVERY_COUNT)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT_MAX:
        return int(value)
    notes.append(f"{DELIVERY_COUNT} {value!r} is not a count: ignored")
    return 0


_JAVA_START: Final = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"})
_JAVA_PART: Final = _JAVA_START | {"Nd", "Mn", "Mc", "Cf"}
_JAVA_IGNORABLE: Final = frozenset(
    chr(c) for c in (*range(0x09), *range(0x0E, 0x1C), *range(0x7F, 0xA0))
)


def is_java_identifier(name: str) -> bool:
    """Whether Java's ``Character.isJavaIdentifierStart``/``Part`` accept ``name``.

    DropboxMQ's reader refuses a property name that is not one (and drops every
    property after it).
    """
    if not name or unicodedata.category(name[0]) not in _JAVA_START:
        return False
    return all(unicodedata.category(c) in _JAVA_PART or c in _JAVA_IGNORABLE for c in name[1:])


def lost_properties(properties: Mapping[str, PropertyValue]) -> list[str]:
    """The names of ``properties`` that :func:`encode_filename` does not write and
    whose meaning is lost: every name that is not a Java identifier, except
    ``content-type`` (the body kind carries what it says)."""
    return [n for n in properties if n != _CONTENT_TYPE and not is_java_identifier(n)]


def encode_property(name: str, value: PropertyValue) -> str:
    kind = property_type(value)
    if kind is PropertyType.BOOLEAN:
        text = "true" if value else "false"
    elif kind in (PropertyType.FLOAT, PropertyType.DOUBLE):
        text = _java_float_text(float(value))
    elif kind is PropertyType.STRING:
        text = str(value)
    else:
        text = str(int(value))
    return f"{enc(name)}{_TYPE_LETTERS[kind]}={enc(text)}"
