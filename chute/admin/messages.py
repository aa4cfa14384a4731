"""A browsed message as the admin API shows it: JSON, its body capped.

A body is given as UTF-8 text when the message is a text message whose body
decodes so (``"body_encoding": "utf-8"``), else as base64 (``"base64"``). Only
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
from typing import Any, Final

from chute.core.consumer import Entry
from chute.message import BodyKind, PropertyValue

BODY_CAP: Final = 64 << 10
"""The most body bytes a browsed message shows."""


def message_view(entry: Entry, cap: int = BODY_CAP) -> dict[str, Any]:
    """``entry``'s message as JSON-ready data, with this queue's delivery fields."""
    message = entry.message
    body, encoding, truncated = body_view(message.body, message.kind, cap)
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


def body_view(body: bytes, kind: BodyKind, cap: int = BODY_CAP) -> tuple[str, str, bool]:
    """(text, encoding, truncated): the first ``cap`` bytes of ``body``, as UTF-8 text
    for a text message that decodes, else base64."""
    truncated = len(body) > cap
    shown = body[:cap] if truncated else body
    if kind is BodyKind.TEXT:
        try:
            return shown.decode("utf-8"), "utf-8", truncated
        except UnicodeDecodeError as exc:
            # a character cut by the cap: show the text up to it
            if truncated and exc.reason == "unexpected end of data":
                try:
                    return shown[: exc.start].decode("utf-8"), "utf-8", truncated
                except UnicodeDecodeError:
                    pass
    return base64.b64encode(shown).decode("ascii"), "base64", truncated


def json_value(value: PropertyValue) -> PropertyValue:
    """A property value JSON can carry: non-finite floats as their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # Byte, Short, Int: plain numbers
    if isinstance(value, float):
        return float(value)
    return value
