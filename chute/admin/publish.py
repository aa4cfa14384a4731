"""A message to publish, as the admin API takes it: a JSON object (RabbitMQ's console's
"Publish message").

Fields, all optional: ``body`` (a string), ``body_encoding`` (``"utf-8"``, the
default, or ``"base64"`` for binary data), ``kind`` (a body kind: ``text`` by
default for UTF-8, ``bytes`` for base64), ``content_type`` (kept as the
``content-type`` property, as STOMP keeps it), ``properties`` (name to string,
number or boolean: a whole number is a JMS long, a fraction a double),
``priority`` (0-9, default 4), ``persistent`` (default true), ``ttl`` (ms, 0:
never expires), ``correlation_id``, ``reply_to`` and ``type``. Anything else, or
a field of the wrong type, is an :class:`~chute.admin.auth.ApiError` 400 saying
which.

Pure.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from chute.admin.messages import CONTENT_TYPE
from chute.admin.params import bad, bool_field, fields, int_field, string_field
from chute.errors import InvalidMessage
from chute.message import BodyKind, Message, PropertyValue

FIELDS: Final = (
    "body",
    "body_encoding",
    "kind",
    "content_type",
    "properties",
    "priority",
    "persistent",
    "ttl",
    "correlation_id",
    "reply_to",
    "type",
)
ENCODINGS: Final = ("utf-8", "base64")


def published(body: Mapping[str, Any]) -> tuple[Message, int]:
    """The message a publish request describes, and its ``ttl`` (ms).

    Raises:
        ApiError: 400, a field is unknown, of the wrong type or out of range.
    """
    fields(body, FIELDS)
    text = string_field(body, "body") or ""
    encoding = string_field(body, "body_encoding") or "utf-8"
    if encoding not in ENCODINGS:
        raise bad(f"the field body_encoding must be utf-8 or base64, not {encoding[:40]!r}")
    data = _decoded(text, encoding)
    kind_name = string_field(body, "kind") or ("text" if encoding == "utf-8" else "bytes")
    try:
        kind = BodyKind(kind_name)
    except ValueError:
        kinds = ", ".join(k.value for k in BodyKind)
        raise bad(f"the field kind must be one of {kinds}, not {kind_name[:40]!r}") from None
    properties = _properties(body.get("properties"))
    content_type = string_field(body, "content_type")
    if content_type:
        properties[CONTENT_TYPE] = content_type
    priority = int_field(body, "priority") if "priority" in body else 4
    try:
        message = Message.create(
            data,
            priority=priority,
            correlation_id=string_field(body, "correlation_id") or None,
            reply_to=string_field(body, "reply_to") or None,
            type=string_field(body, "type") or None,
            persistent=bool_field(body, "persistent", default=True),
            properties=properties,
            kind=kind,
        )
    except InvalidMessage as exc:
        raise bad(f"not a valid message: {exc.reason}", "invalid-message") from None
    return message, int_field(body, "ttl")


def _decoded(text: str, encoding: str) -> bytes:
    if encoding == "utf-8":
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise bad("the field body holds a lone surrogate: it is not UTF-8 text") from None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad("the field body is not valid base64 (body_encoding is base64)") from None


def _properties(value: Any) -> dict[str, PropertyValue]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad("the field properties must be an object: name to string, number or boolean")
    properties: dict[str, PropertyValue] = {}
    for name, item in value.items():
        if not isinstance(item, str | int | float | bool):
            raise bad(
                f"the property {name[:40]!r} must be a string, number or boolean, "
                f"not {type(item).__name__}"
            )
        properties[name] = item
    return properties
