"""AMQP message properties ↔ chute's message.

Publishing (:func:`to_message`): ``delivery_mode`` 2 is persistent and anything else
transient, as in RabbitMQ; ``priority`` 0-255 is clamped to chute's 0-9, and a message
without one takes chute's default (4), so AMQP publishers keep their order among each
other and with every other protocol; ``expiration`` (a string of milliseconds) is a
time to live from acceptance (``"0"``: 1 ms, so it is gone unless delivered at once);
``correlation_id``, ``reply_to`` and ``type`` are chute's own fields. The other
properties travel as string properties named as RabbitMQ's STOMP plugin names them
(``content-type``, ``content-encoding``, ``amqp-message-id``, ``user-id``, ``app-id``,
``timestamp``), so a STOMP consumer reads them as headers.

Headers: each simple entry (``t`` boolean, integers, ``d``/``f`` floats, ``S``
strings) becomes a typed property every protocol reads. When the table holds more
(void, arrays, tables, decimals, timestamps, byte arrays, as Celery's do) the whole
table also travels, encoded, in the property :data:`HEADERS_PROPERTY`, and an AMQP
consumer receives it whole.

Delivering (:func:`to_properties`): the reverse; a message from another protocol gets
its string properties as ``S`` headers and its typed ones as their AMQP types.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any, Final

from pamqp import commands, decode

from chute.amqp import codec
from chute.amqp.codec import table
from chute.message import DEFAULT_PRIORITY, Message, PropertyValue

HEADERS_PROPERTY: Final = "amqp-headers"
"""The string property carrying a header table that has more than simple values."""
EXCHANGE_PROPERTY: Final = "amqp-exchange"
"""The exchange a message was published (or dead-lettered) to, but the default one."""
ROUTING_KEY_PROPERTY: Final = "amqp-routing-key"
"""The routing key it was published (or dead-lettered) with, beside :data:`EXCHANGE_PROPERTY`."""

_AS_PROPERTY: Final = (
    ("content_type", "content-type"),
    ("content_encoding", "content-encoding"),
    ("message_id", "amqp-message-id"),
    ("user_id", "user-id"),
    ("app_id", "app-id"),
)
_RESERVED: Final = frozenset(name for _, name in _AS_PROPERTY) | {HEADERS_PROPERTY, "timestamp"}
_NOT_HEADERS: Final = _RESERVED | {EXCHANGE_PROPERTY, ROUTING_KEY_PROPERTY}
"""What a delivery does not give back as headers (``basic.deliver`` carries the last two)."""
MAX_PRIORITY: Final = 9


def to_message(properties: commands.Basic.Properties, body: bytes) -> tuple[Message, int]:
    """The chute message of a publish and its time to live in ms (0: none)."""
    props: dict[str, PropertyValue] = {}
    for attribute, name in _AS_PROPERTY:
        value = getattr(properties, attribute, None)
        if value:
            props[name] = str(value)
    stamp = properties.timestamp
    if isinstance(stamp, datetime.datetime):
        props["timestamp"] = int(stamp.timestamp())
    headers = properties.headers
    if headers:
        whole = False
        for key, value in headers.items():
            simple = _simple(value)
            if simple is None:
                whole = True
            elif key not in _RESERVED:
                props[key] = simple
        if whole:
            props[HEADERS_PROPERTY] = base64.b64encode(table(headers)).decode()
    priority = properties.priority
    ttl = 0
    expiration = properties.expiration
    if expiration:
        try:
            ttl = max(int(expiration), 0) or 1
        except ValueError:
            ttl = 0
    message = Message(
        body,
        priority=DEFAULT_PRIORITY if priority is None else min(int(priority), MAX_PRIORITY),
        correlation_id=properties.correlation_id or None,
        reply_to=properties.reply_to or None,
        type=properties.message_type or None,
        persistent=properties.delivery_mode == 2,
        properties=props,
    )
    return message, ttl


def scaled(priority: int | None, top: int) -> int:
    """chute's priority of a message published with AMQP ``priority`` to a queue declared
    with ``x-max-priority`` ``top``: as RabbitMQ, none counts as 0 and more than ``top`` as
    ``top``; 0..``top`` is spread over chute's 0-9, rounding half up (``top`` up to 9
    keeps every level apart)."""
    level = min(max(priority or 0, 0), top)
    return (level * MAX_PRIORITY * 2 + top) // (top * 2)


def _simple(value: Any) -> PropertyValue | None:
    if isinstance(value, bool | int | float | str):
        return value
    return None


def to_properties(message: Message, now: int) -> dict[str, Any]:
    """The AMQP properties of a delivery of ``message`` at ``now`` (ms since the epoch)."""
    out: dict[str, Any] = {"delivery_mode": 2 if message.persistent else 1}
    if message.priority != DEFAULT_PRIORITY:
        out["priority"] = message.priority
    if message.correlation_id is not None:
        out["correlation_id"] = message.correlation_id
    if message.reply_to is not None:
        out["reply_to"] = message.reply_to
    if message.type is not None:
        out["message_type"] = message.type
    if message.expiration:
        out["expiration"] = str(max(message.expiration - now, 0))
    props = message.properties
    if not props:
        return out
    for attribute, name in _AS_PROPERTY:
        value = props.get(name)
        if value is not None:
            out[attribute] = str(value)
    stamp = props.get("timestamp")
    if isinstance(stamp, int) and not isinstance(stamp, bool):
        out["timestamp"] = stamp
    whole = props.get(HEADERS_PROPERTY)
    headers: dict[str, Any] = {}
    if isinstance(whole, str):
        headers = _decoded_table(whole)
    for key, value in props.items():
        if key not in _NOT_HEADERS and key not in headers:
            headers[key] = value
    if headers:
        out["headers"] = headers
    return out


def _decoded_table(text: str) -> dict[str, Any]:
    try:
        raw = base64.b64decode(text)
        _, value = decode.field_table(raw)
    except (ValueError, TypeError, IndexError, KeyError):
        return {}
    return dict(value)


SHARED_CONTENT_MAX: Final = 1 << 20
"""The largest body whose encoded frames are kept for the next consumer (1 MiB)."""


class _LastContent:
    """The content frames of the message delivered last, kept: a fan-out delivers one
    message to several consumers in a row, and encodes it once. Only for a message
    whose frames are the same for every consumer (no expiration, not a stream's), and
    of at most :data:`SHARED_CONTENT_MAX` bytes, so what is kept stays small."""

    __slots__ = ("channel", "data", "frame_max", "message")

    def __init__(self) -> None:
        self.message: Message | None = None
        self.channel = 0
        self.frame_max = 0
        self.data = b""

    def content(self, channel: int, message: Message, frame_max: int) -> bytes:
        if self.message is message and self.channel == channel and self.frame_max == frame_max:
            return self.data
        data = codec.content(channel, to_properties(message, 0), message.body, frame_max)
        if len(message.body) <= SHARED_CONTENT_MAX:
            self.message, self.channel, self.frame_max, self.data = (
                message,
                channel,
                frame_max,
                data,
            )
        return data


_LAST: Final = _LastContent()


def shared_content(channel: int, message: Message, frame_max: int) -> bytes:
    """The content frames of a delivery of ``message`` on ``channel``, the same for every
    consumer (``message`` has no expiration and is not a stream's): encoded once for the
    consumers it goes to in a row."""
    return _LAST.content(channel, message, frame_max)
