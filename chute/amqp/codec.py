"""AMQP 0-9-1 frames in and out, sans-IO: bytes in, events out; events in, bytes out.

``pamqp`` (the codec RabbitMQ's own Python libraries build on) decodes each whole
frame and encodes the methods the server sends. chute owns what a server needs
around it: the buffering (a frame is decoded only once its ``7 + size + 1`` bytes are
in), the frame size limit, the assembly of content (``basic.publish``, then a
content header, then body frames up to the header's size) and, for the methods that
carry names (``basic.deliver``, ``basic.get-ok``, ``basic.return``,
``queue.declare-ok``) and for content headers, its own encoders: pamqp validates
names against a narrower pattern than AMQP allows, and its field-table encoder
narrows types (a double becomes a float), which would change what a consumer reads.

Bad input raises :class:`~chute.amqp.codes.AmqpError` with the hard reply code it
deserves (501 a bad frame, 502 a bad method, 503 an unknown method, 505 a frame out
of place); nothing else escapes :meth:`AmqpCodec.next_event`.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pamqp import base, commands, frame, header
from pamqp import exceptions as pamqp_errors

from chute.amqp.codes import (
    COMMAND_INVALID,
    FRAME_ERROR,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    AmqpError,
)
from chute.sansio import NEED_DATA, NeedData

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_MIN_SIZE: Final = 4096
"""The largest frame a peer may send before ``connection.tune-ok`` (the spec's minimum)."""
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"
_FRAME_END: Final = 0xCE
_HEAD: Final = struct.Struct(">BHI")
_METHOD_IDS: Final = struct.Struct(">HH")
_INDEX: Final = struct.Struct(">I")


@dataclass(slots=True)
class Method:
    """A method frame (not one that carries content)."""

    channel: int
    method: base.Frame


@dataclass(slots=True)
class Content:
    """A ``basic.publish`` with its content header and whole body."""

    channel: int
    method: commands.Basic.Publish
    properties: commands.Basic.Properties
    body: bytes


@dataclass(slots=True)
class HeartbeatEvent:
    """A heartbeat frame (only proof the peer lives)."""


@dataclass(slots=True)
class _Pending:
    method: commands.Basic.Publish
    properties: commands.Basic.Properties | None = None
    size: int = 0
    parts: list[bytes] = field(default_factory=list)
    got: int = 0


Event = Method | Content | HeartbeatEvent


class AmqpCodec:
    """The server side of one connection's framing. See the module docstring."""

    def __init__(self, max_frame_size: int = FRAME_MIN_SIZE, max_body: int = 0) -> None:
        self.max_frame_size = max_frame_size
        self.max_body = max_body  # 0: unlimited (the server bounds messages elsewhere)
        self._buf = bytearray()
        self._pos = 0
        self.header_seen = False
        self._pending: dict[int, _Pending] = {}

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos + sum(p.got for p in self._pending.values())

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    def discard(self) -> None:
        self._buf.clear()
        self._pos = 0
        self._pending.clear()

    def read_protocol_header(self) -> bool | NeedData:
        """Whether the first 8 bytes are AMQP 0-9-1's protocol header (NEED_DATA: fewer
        are in). On False the server answers with :data:`PROTOCOL_HEADER` and closes."""
        if len(self._buf) - self._pos < len(PROTOCOL_HEADER):
            if not PROTOCOL_HEADER.startswith(bytes(self._buf[self._pos :])):
                return False
            return NEED_DATA
        got = bytes(self._buf[self._pos : self._pos + 8])
        self._pos += 8
        self.header_seen = got == PROTOCOL_HEADER
        return self.header_seen

    def next_event(self) -> Event | NeedData:
        """The next whole method, content or heartbeat (NEED_DATA: none is whole yet).

        Raises:
            AmqpError: the input breaks the framing rules (a hard error).
        """
        while True:
            buf = self._buf
            pos = self._pos
            if len(buf) - pos < 7:
                self._compact()
                return NEED_DATA
            kind, channel, size = _HEAD.unpack_from(buf, pos)
            if size + 8 > self.max_frame_size:
                raise AmqpError(
                    FRAME_ERROR,
                    f"a frame of {size + 8} bytes is over the negotiated frame_max "
                    f"{self.max_frame_size}: split bodies at frame_max - 8",
                )
            end = pos + 7 + size
            if len(buf) <= end:
                self._compact()
                return NEED_DATA
            if buf[end] != _FRAME_END:
                raise AmqpError(FRAME_ERROR, "a frame does not end with 0xCE")
            if kind == 1 and size >= 4 and _INDEX.unpack_from(buf, pos + 7)[0] == _PUBLISH:
                whole = self._whole_publish(channel, pos + 7, end)
                if whole is not None:
                    return whole
            payload = bytes(memoryview(buf)[pos + 7 : end])  # one copy, not two
            self._pos = end + 1
            event = self._frame(kind, channel, payload)
            if event is not None:
                return event

    def _whole_publish(self, channel: int, start: int, end: int) -> Content | None:
        """A ``basic.publish`` whose content header and one body frame are in the buffer
        too, read in one go (the per-message path); None: read it frame by frame (it
        is not all in, or has several body frames, or breaks a rule the frame-by-frame
        path names)."""
        if channel in self._pending:
            return None
        buf = self._buf
        have = len(buf)
        view = memoryview(buf)
        try:
            method = _publish(bytes(view[start:end]))
            if method is None:
                return None
            at = end + 1
            if have - at < 7:
                return None
            kind, on, size = _HEAD.unpack_from(buf, at)
            header_end = at + 7 + size
            if (
                kind != 2
                or on != channel
                or size + 8 > self.max_frame_size
                or have <= header_end
                or buf[header_end] != _FRAME_END
            ):
                return None
            if size < 14:
                return None
            head = bytes(view[at + 7 : header_end])
            _, _, body_size, flags = _HEADER_FIELDS.unpack_from(head)
            if flags & ~_SIMPLE_FLAGS:
                return None
            if self.max_body and body_size > self.max_body:
                return None
            properties = _simple_properties(head, flags)
            if properties is None:
                return None
            after = header_end + 1
            body = b""
            if body_size:
                if have - after < 7:
                    return None
                kind, on, size = _HEAD.unpack_from(buf, after)
                body_end = after + 7 + size
                if (
                    kind != 3
                    or on != channel
                    or size != body_size
                    or size + 8 > self.max_frame_size
                    or have <= body_end
                    or buf[body_end] != _FRAME_END
                ):
                    return None
                body = bytes(view[after + 7 : body_end])
                after = body_end + 1
        finally:
            view.release()
        self._pos = after
        return Content(channel, method, properties, body)

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def _frame(self, kind: int, channel: int, payload: bytes) -> Event | None:
        pending = self._pending.get(channel)
        if kind == 1:
            if pending is not None:
                raise AmqpError(
                    UNEXPECTED_FRAME,
                    f"a method frame on channel {channel} while its content is incomplete",
                )
            method = _method(payload)
            if isinstance(method, commands.Basic.Publish):
                self._pending[channel] = _Pending(method)
                return None
            return Method(channel, method)
        if kind == 2:
            if pending is None or pending.properties is not None:
                raise AmqpError(
                    UNEXPECTED_FRAME, f"a content header on channel {channel} out of place"
                )
            size, properties = _content_header(payload)
            if self.max_body and size > self.max_body:
                raise AmqpError(
                    FRAME_ERROR,
                    f"a message body of {size} bytes is over the "
                    f"limit of {self.max_body} (server.max_packet_size)",
                )
            pending.properties = properties
            pending.size = size
            return self._complete(channel, pending)
        if kind == 3:
            if pending is None or pending.properties is None:
                raise AmqpError(UNEXPECTED_FRAME, f"a body frame on channel {channel} out of place")
            pending.parts.append(payload)
            pending.got += len(payload)
            if pending.got > pending.size:
                raise AmqpError(
                    FRAME_ERROR,
                    f"body frames on channel {channel} exceed the content header's size",
                )
            return self._complete(channel, pending)
        if kind == 8:
            if channel != 0:
                raise AmqpError(COMMAND_INVALID, "a heartbeat frame must be on channel 0")
            return HeartbeatEvent()
        raise AmqpError(FRAME_ERROR, f"unknown frame type {kind}")

    def _complete(self, channel: int, pending: _Pending) -> Content | None:
        if pending.got < pending.size:
            return None
        del self._pending[channel]
        assert pending.properties is not None  # noqa: S101 (a header came)
        return Content(channel, pending.method, pending.properties, b"".join(pending.parts))

    # -- encoding ------------------------------------------------------------------------

    @staticmethod
    def method(channel: int, method: base.Frame) -> bytes:
        """A method frame (one without names pamqp would refuse)."""
        return frame.marshal(method, channel)


_HEADER_FIELDS: Final = struct.Struct(">HHQH")  # class, weight, body size, flags
_SHORTSTR_PROPERTIES: Final = (
    (15, "content_type"),
    (14, "content_encoding"),
    (10, "correlation_id"),
    (9, "reply_to"),
    (8, "expiration"),
    (7, "message_id"),
    (5, "message_type"),
    (4, "user_id"),
    (3, "app_id"),
    (2, "cluster_id"),
)
_SIMPLE_FLAGS: Final = sum(1 << bit for bit, _ in _SHORTSTR_PROPERTIES) | 1 << 12 | 1 << 11
_PROPERTIES: Final = commands.Basic.Properties
_new_properties: Final = object.__new__


def _content_header(payload: bytes) -> tuple[int, commands.Basic.Properties]:
    """A content header's body size and properties: read directly when it holds only
    short strings and octets (the per-message path), else by pamqp."""
    if len(payload) >= 14:
        _, _, size, flags = _HEADER_FIELDS.unpack_from(payload)
        if not flags & ~_SIMPLE_FLAGS:
            properties = _simple_properties(payload, flags)
            if properties is not None:
                return size, properties
    content_header = header.ContentHeader()
    try:
        content_header.unmarshal(payload)
    except (struct.error, ValueError, TypeError, IndexError, KeyError) as exc:
        raise AmqpError(SYNTAX_ERROR, f"a malformed content header: {exc}") from None
    return content_header.body_size, content_header.properties


def _simple_properties(payload: bytes, flags: int) -> commands.Basic.Properties | None:
    """Properties of short strings and octets only, in flag order; None: let pamqp read
    them (they are malformed, and pamqp says how)."""
    properties = _new_properties(_PROPERTIES)
    properties.content_type = properties.content_encoding = properties.headers = None
    properties.delivery_mode = properties.priority = properties.correlation_id = None
    properties.reply_to = properties.expiration = properties.message_id = None
    properties.timestamp = properties.message_type = properties.user_id = None
    properties.app_id = None
    properties.cluster_id = ""
    at = 14
    end = len(payload)
    try:
        for bit, name in _SHORTSTR_PROPERTIES[:2]:
            if flags & (1 << bit):
                size = payload[at]
                if at + 1 + size > end:
                    return None
                setattr(properties, name, payload[at + 1 : at + 1 + size].decode())
                at += 1 + size
        if flags & (1 << 12):
            properties.delivery_mode = payload[at]
            at += 1
        if flags & (1 << 11):
            properties.priority = payload[at]
            at += 1
        for bit, name in _SHORTSTR_PROPERTIES[2:]:
            if flags & (1 << bit):
                size = payload[at]
                if at + 1 + size > end:
                    return None
                setattr(properties, name, payload[at + 1 : at + 1 + size].decode())
                at += 1 + size
    except (IndexError, UnicodeDecodeError):
        return None
    return properties


_PUBLISH: Final = 0x003C0028
_ACK: Final = 0x003C0050
_ACK_FIELDS: Final = struct.Struct(">QB")


def _publish(payload: bytes) -> commands.Basic.Publish | None:
    """``basic.publish`` read directly (the per-message path); None: let pamqp read it."""
    try:
        size = payload[6]
        exchange = payload[7 : 7 + size].decode()
        at = 7 + size
        key_size = payload[at]
        key = payload[at + 1 : at + 1 + key_size].decode()
        bits = payload[at + 1 + key_size]
    except (IndexError, UnicodeDecodeError):
        return None
    if len(payload) != at + 2 + key_size:
        return None
    method = commands.Basic.Publish.__new__(commands.Basic.Publish)
    method.ticket = 0
    method.exchange = exchange
    method.routing_key = key
    method.mandatory = bool(bits & 1)
    method.immediate = bool(bits & 2)
    return method


def _method(payload: bytes) -> base.Frame:
    if len(payload) < 4:
        raise AmqpError(SYNTAX_ERROR, "a method frame shorter than its class and method ids")
    index = struct.unpack_from(">I", payload)[0]
    if index == _PUBLISH:
        publish = _publish(payload)
        if publish is not None:
            return publish
    elif index == _ACK and len(payload) == 13:
        tag, bits = _ACK_FIELDS.unpack_from(payload, 4)
        ack = commands.Basic.Ack.__new__(commands.Basic.Ack)
        ack.delivery_tag = tag
        ack.multiple = bool(bits & 1)
        return ack
    kind = commands.INDEX_MAPPING.get(index)
    if kind is None:
        class_id, method_id = _METHOD_IDS.unpack_from(payload)
        raise AmqpError(
            COMMAND_INVALID, f"unknown method {class_id}.{method_id}", (class_id, method_id)
        )
    method: base.Frame = kind()
    try:
        method.unmarshal(payload[4:])
    except (
        struct.error,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        pamqp_errors.PAMQPException,
    ) as exc:
        raise AmqpError(SYNTAX_ERROR, f"a malformed {method.name}: {exc}", _ids(method)) from None
    return method


def _ids(method: base.Frame) -> tuple[int, int]:
    index = method.index
    return index >> 16, index & 0xFFFF


def ids(method: base.Frame) -> tuple[int, int]:
    """The (class id, method id) of ``method``."""
    return _ids(method)


# -- encoders of the frames the server sends with names and content ----------------------


def frame_bytes(kind: int, channel: int, payload: bytes) -> bytes:
    return _HEAD.pack(kind, channel, len(payload)) + payload + b"\xce"


def shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raw = raw[:255]
    return bytes((len(raw),)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


_DELIVER_HEAD: Final = struct.Struct(">BHIHHB")  # frame, channel, size, ids, tag's size
_TAG_BITS: Final = struct.Struct(">QB")


def deliver(  # noqa: PLR0917 - positional: one call per delivery
    channel: int, tag: str, delivery_tag: int, redelivered: bool, exchange: str, key: str
) -> bytes:
    """A ``basic.deliver`` method frame."""
    raw_tag = tag.encode()[:255]
    raw_exchange = exchange.encode()[:255]
    raw_key = key.encode()[:255]
    size = 4 + 1 + len(raw_tag) + 9 + 1 + len(raw_exchange) + 1 + len(raw_key)
    return b"".join(
        (
            _DELIVER_HEAD.pack(1, channel, size, 60, 60, len(raw_tag)),
            raw_tag,
            _TAG_BITS.pack(delivery_tag, 1 if redelivered else 0),
            bytes((len(raw_exchange),)),
            raw_exchange,
            bytes((len(raw_key),)),
            raw_key,
            b"\xce",
        )
    )


def get_ok(  # noqa: PLR0917 - the method's fields in order
    channel: int, delivery_tag: int, redelivered: bool, exchange: str, key: str, count: int
) -> bytes:
    payload = (
        b"\x00\x3c\x00\x47"
        + struct.pack(">QB", delivery_tag, 1 if redelivered else 0)
        + shortstr(exchange)
        + shortstr(key)
        + struct.pack(">I", count)
    )
    return frame_bytes(1, channel, payload)


def basic_return(channel: int, code: int, text: str, exchange: str, key: str) -> bytes:
    payload = (
        b"\x00\x3c\x00\x32" + struct.pack(">H", code) + shortstr(text) + shortstr(exchange)
    ) + shortstr(key)
    return frame_bytes(1, channel, payload)


def declare_ok(channel: int, queue: str, messages: int, consumers: int) -> bytes:
    payload = b"\x00\x32\x00\x0b" + shortstr(queue) + struct.pack(">II", messages, consumers)
    return frame_bytes(1, channel, payload)


PROPERTY_FLAGS: Final = (
    ("content_type", 15),
    ("content_encoding", 14),
    ("headers", 13),
    ("delivery_mode", 12),
    ("priority", 11),
    ("correlation_id", 10),
    ("reply_to", 9),
    ("expiration", 8),
    ("message_id", 7),
    ("timestamp", 6),
    ("message_type", 5),
    ("user_id", 4),
    ("app_id", 3),
)


_CONTENT_HEAD: Final = struct.Struct(">BHIHHQH")  # frame, channel, size, class, weight,
# body size, flags
_FRAME_HEAD: Final = _HEAD
_OCTETS: Final = frozenset(("delivery_mode", "priority"))
_BITS: Final = dict(PROPERTY_FLAGS)


def content(channel: int, properties: Mapping[str, Any], body: bytes, frame_max: int) -> bytes:
    """The content header and body frames of a message, as one ``bytes`` (bodies split at
    ``frame_max - 8``; an empty body has no body frame)."""
    flags = 0
    values: list[tuple[int, bytes]] = []
    bits = _BITS
    for name, value in properties.items():
        if value is None:
            continue
        bit = bits.get(name)
        if bit is None:
            continue
        flags |= 1 << bit
        if name in _OCTETS:
            values.append((bit, bytes((int(value) & 0xFF,))))
        elif name == "headers":
            values.append((bit, table(value)))
        elif name == "timestamp":
            values.append((bit, struct.pack(">Q", int(value))))
        else:
            values.append((bit, shortstr(str(value))))
    if len(values) > 1:
        values.sort(reverse=True)  # the order of the flags: bit 15 first
    fields = b"".join([v for _, v in values])
    size = len(body)
    out: list[bytes | memoryview] = [
        _CONTENT_HEAD.pack(2, channel, 14 + len(fields), 60, 0, size, flags),
        fields,
        b"\xce",
    ]
    step = max(frame_max - 8, 1) if frame_max else size or 1
    if size <= step:
        if size:
            out += (_FRAME_HEAD.pack(3, channel, size), body, b"\xce")
    else:
        view = memoryview(body)
        for start in range(0, size, step):
            part = view[start : start + step]
            out += (_FRAME_HEAD.pack(3, channel, len(part)), part, b"\xce")
    return b"".join(out)


def table(value: Mapping[str, Any]) -> bytes:
    """An AMQP field table keeping each value's type as wide as Python holds it (an int is
    ``I`` or ``l``, a float ``d``), so a relayed header reads back as it was sent."""
    out = bytearray()
    for key, item in value.items():
        out += shortstr(str(key))
        out += _field(item)
    return struct.pack(">I", len(out)) + bytes(out)


def _field(value: Any) -> bytes:
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return b"I" + struct.pack(">i", value)
        return b"l" + struct.pack(">q", max(min(value, (1 << 63) - 1), -(1 << 63)))
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, str):
        return b"S" + longstr(value)
    if isinstance(value, bytes | bytearray):
        return b"x" + longstr(bytes(value))
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent
        places = -int(exponent) if isinstance(exponent, int) and exponent < 0 else 0
        number = int(value.scaleb(places))
        return b"D" + struct.pack(">Bi", places, number)
    if isinstance(value, datetime.datetime):
        return b"T" + struct.pack(">Q", int(value.timestamp()))
    if isinstance(value, Mapping):
        return b"F" + table(value)
    if isinstance(value, Sequence):
        items = b"".join(_field(v) for v in value)
        return b"A" + struct.pack(">I", len(items)) + items
    return b"S" + longstr(str(value))
