"""A browsed message as the admin API shows it: JSON, its body capped.

A body is given as UTF-8 text (``"body_encoding": "utf-8"``) when it is text,
whatever its kind: a text message, a body whose ``content-type`` property
names text (``text/*``, JSON, XML, YAML, form data: a STOMP producer's
``application/json``), or one with no content type that decodes as UTF-8
without control characters (a ``chute send`` from standard input), unless it
is a serialized object. Anything else, and a body whose content type names
binary data, is given as base64 (``"base64"``). Only
its first :data:`BODY_CAP` bytes are given (``"truncated": true`` says a body
was cut; ``"size"`` is always the whole body's size), so a page of large
messages stays a small answer. A text body is cut on a character boundary.

Property values keep their JSON type; a float that JSON cannot carry (NaN,
the infinities) is given as its name, a string. ``property_types`` names each
property's JMS type.

Pure.
"""

from __future__ import annotations

import base64
import math
import re
from typing import Any, Final

from chute.core.model.consumer import Entry
from chute.message import BodyKind, PropertyValue

BODY_CAP: Final = 64 << 10
"""The most body bytes a browsed message shows."""
CONTENT_TYPE: Final = "content-type"
"""The property that names a body's media type (STOMP's header, kept as a property)."""
TEXT_TYPES: Final = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/x-ndjson",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-www-form-urlencoded",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/graphql",
        "application/csv",
    }
)
"""Media types outside ``text/*`` whose bodies are text."""
TEXT_SUFFIXES: Final = ("+json", "+xml", "+yaml")
"""Structured-syntax suffixes of media types whose bodies are text."""
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters other than tab, newline and carriage return: binary data."""


def message_view(entry: Entry, cap: int = BODY_CAP) -> dict[str, Any]:
    """``entry``'s message as JSON-ready data, with this queue's delivery fields."""
    message = entry.message
    content_type = message.properties.get(CONTENT_TYPE)
    body, encoding, truncated = body_view(
        message.body,
        message.kind,
        cap,
        content_type=content_type if isinstance(content_type, str) else None,
    )
    view = message.headers_json()
    view.update(
        seq=entry.seq,
        redelivered=entry.redelivered,
        delivery_count=entry.delivery_count,
        properties={name: json_value(v) for name, v in message.properties.items()},
        body=body,
        body_encoding=encoding,
        size=len(message.body),
        truncated=truncated,
    )
    return view


def body_view(
    body: bytes, kind: BodyKind, cap: int = BODY_CAP, *, content_type: str | None = None
) -> tuple[str, str, bool]:
    """(text, encoding, truncated): the first ``cap`` bytes of ``body``, as UTF-8 text
    when it is text (see the module docstring), else base64."""
    truncated = len(body) > cap
    shown = body[:cap] if truncated else body
    declared = _declared_text(kind, content_type)
    if declared is not False:
        text = _utf8(shown, truncated)
        if text is not None and (declared or not _CONTROL.search(text)):
            return text, "utf-8", truncated
    return base64.b64encode(shown).decode("ascii"), "base64", truncated


def _declared_text(kind: BodyKind, content_type: str | None) -> bool | None:
    """True: the message says it is text; False: it says it is not; None: it says
    nothing (its bytes decide)."""
    if kind is BodyKind.TEXT:
        return True
    if content_type:
        media = content_type.split(";", 1)[0].strip().lower()
        return media.startswith("text/") or media in TEXT_TYPES or media.endswith(TEXT_SUFFIXES)
    if kind is BodyKind.OBJECT:
        return False  # a serialized object: never shown as text
    return None


def _utf8(shown: bytes, truncated: bool) -> str | None:
    """``shown`` decoded as UTF-8 (up to a character the cap cut), or None."""
    try:
        return shown.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.reason == "unexpected end of data":
            try:
                return shown[: exc.start].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None


def json_value(value: PropertyValue) -> PropertyValue:
    """A property value JSON can carry: non-finite floats as their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # Byte, Short, Int: plain numbers
    if isinstance(value, float):
        return float(value)
    return value
