"""The message content block: everything a producer chose, encoded once.

One codec, two users: the native protocol carries the block in ``Send``,
``Deliver`` and browse results (:mod:`chute.protocol`), and the journal keeps
the same bytes in its ADD records (:mod:`chute.store.payload`). It belongs to
neither: both depend on it, and it depends only on the message model. So a
message the broker received is forwarded and stored without being encoded
again (``Message.encoded`` holds the block a decoded ``Send`` came with).

Layout (big-endian)::

    priority u8 | flags u8 | kind u8 | id_len u16 | corr_len u16 | reply_len u16
    | type_len u16 | n_props u16 | id | correlation_id | reply_to | type
    | n_props x property | body (the rest of the block)
    flags: 1 persistent, 2 has correlation_id, 4 has reply_to, 8 has type

    property: tag u8 (chute.message.PropertyType) | name_len u16 | name | value
    value by tag: boolean u8, byte i8, short i16, int i32, long i64,
    float f32, double f64, string u32-length UTF-8

The broker-assigned fields (timestamp, expiration, delivery count,
redelivered) are not in the block: they travel in the Deliver envelope, so
the bytes of a Send's block are exactly those of the Deliver that forwards it.

Encoders raise :class:`~chute.errors.LocalProtocolError` for a value the block
cannot carry; :func:`decode_content` raises
:class:`~chute.errors.RemoteProtocolError` (``malformed-packet``,
``too-many-properties``), which the journal reports as a corrupt record.
Pure functions: safe on any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from chute.errors import InvalidMessage, LocalProtocolError, RemoteProtocolError
from chute.message import (
    SIZE_OVERHEAD,
    BodyKind,
    Byte,
    Float,
    Int,
    Long,
    Message,
    PropertyType,
    PropertyValue,
    Short,
    property_type,
)

DEFAULT_MAX_PROPERTIES: Final = 1024

_U32: Final = struct.Struct(">I")
_CONTENT: Final = struct.Struct(">BBBHHHHH")
_CONTENT_SIZE: Final = _CONTENT.size
_PERSISTENT, _HAS_CORR, _HAS_REPLY, _HAS_TYPE = 1, 2, 4, 8
_KNOWN_FLAGS: Final = 15
_OPTIONAL_STRINGS: Final = _HAS_CORR | _HAS_REPLY | _HAS_TYPE
_KINDS: Final = tuple(BodyKind)
_KIND_INDEX: Final = {k: i for i, k in enumerate(_KINDS)}
KIND_CODES: Final = _KIND_INDEX
"""The wire code of each body kind."""
KINDS: Final = _KINDS
"""The body kind of each wire code."""
CONTENT_HEAD: Final = _CONTENT
"""The fixed head of a content block: priority, flags, kind, the four string
lengths and the property count."""
PERSISTENT_FLAG: Final = _PERSISTENT
"""The persistent bit of the head's second byte (flags)."""
_PROP_HEAD: Final = struct.Struct(">BH")

ENCODE_ERRORS: Final = (
    struct.error,
    UnicodeEncodeError,
    OverflowError,
    InvalidMessage,
    AttributeError,  # a str field given as something else
    TypeError,
    KeyError,  # not a BodyKind
)
"""What encoding a value the wire cannot carry may raise (mapped to LocalProtocolError)."""


def malformed(reason: str) -> RemoteProtocolError:
    return RemoteProtocolError(reason, "malformed-packet")


_TAG_BY_TYPE: Final[dict[type, PropertyType]] = {
    bool: PropertyType.BOOLEAN,
    Byte: PropertyType.BYTE,
    Short: PropertyType.SHORT,
    Int: PropertyType.INT,
    Long: PropertyType.LONG,
    int: PropertyType.LONG,
    Float: PropertyType.FLOAT,
    float: PropertyType.DOUBLE,
    str: PropertyType.STRING,
}
_FIXED_VALUES: Final[dict[PropertyType, struct.Struct]] = {
    PropertyType.BOOLEAN: struct.Struct(">B"),
    PropertyType.BYTE: struct.Struct(">b"),
    PropertyType.SHORT: struct.Struct(">h"),
    PropertyType.INT: struct.Struct(">i"),
    PropertyType.LONG: struct.Struct(">q"),
    PropertyType.FLOAT: struct.Struct(">f"),
    PropertyType.DOUBLE: struct.Struct(">d"),
}


def as_bool(value: int) -> bool:
    if value > 1:
        raise ValueError("boolean must be 0 or 1")
    return value == 1


# Indexed by tag: (struct, wrapper) for fixed-size values; None for string and unknown tags.
_VALUE_DECODERS: Final[tuple[tuple[struct.Struct, Callable[[Any], PropertyValue]] | None, ...]] = (
    None,
    (_FIXED_VALUES[PropertyType.BOOLEAN], as_bool),
    (_FIXED_VALUES[PropertyType.BYTE], Byte),
    (_FIXED_VALUES[PropertyType.SHORT], Short),
    (_FIXED_VALUES[PropertyType.INT], Int),
    (_FIXED_VALUES[PropertyType.LONG], int),
    (_FIXED_VALUES[PropertyType.FLOAT], Float),
    (_FIXED_VALUES[PropertyType.DOUBLE], float),
    None,
)


# By exact Python type: (wire tag, value struct or None for strings).
_VALUE_ENCODERS: Final[dict[type, tuple[int, struct.Struct | None]]] = {
    t: (int(tag), _FIXED_VALUES.get(tag)) for t, tag in _TAG_BY_TYPE.items()
}


def _encode_properties(properties: Mapping[str, PropertyValue]) -> bytes:
    parts: list[bytes] = []
    append = parts.append
    encoders = _VALUE_ENCODERS
    for name, value in properties.items():
        encoder = encoders.get(type(value))
        if encoder is None:  # a subclass of a JMS type: ask the model
            tag = property_type(value)
            encoder = (int(tag), _FIXED_VALUES.get(tag))
        tag_int, st = encoder
        name_bytes = name.encode()
        append(_PROP_HEAD.pack(tag_int, len(name_bytes)))
        append(name_bytes)
        if st is None:
            data = value.encode()  # type: ignore[union-attr]
            append(_U32.pack(len(data)))
            append(data)
        else:
            append(st.pack(value))
    return b"".join(parts)


def encode_content(message: Message) -> bytes:
    """The content block of ``message``: every field its producer chose.

    Not cached here: the broker keeps the bytes in ``message.encoded``
    (a decoded Send sets it).

    Raises:
        LocalProtocolError: a field does not fit the wire (a string over 64 KiB, ...).
    """
    return encode_fields(
        message.body,
        message.id,
        message.priority,
        message.persistent,
        message.kind,
        message.correlation_id,
        message.reply_to,
        message.type,
        message.properties,
    )


def encode_fields(  # noqa: PLR0917 - hot path, called positionally
    body: bytes,
    message_id: str,
    priority: int,
    persistent: bool,
    kind: BodyKind,
    correlation_id: str | None,
    reply_to: str | None,
    type_: str | None,
    properties: Mapping[str, PropertyValue] | None,
) -> bytes:
    """A content block from the producer's fields, without building a Message first.

    Raises:
        LocalProtocolError: a field does not fit the wire (a string over 64 KiB, ...).
    """
    try:
        id_bytes = message_id.encode()
        flags = _PERSISTENT if persistent else 0
        corr = reply = type_bytes = b""
        if correlation_id is not None:
            flags |= _HAS_CORR
            corr = correlation_id.encode()
        if reply_to is not None:
            flags |= _HAS_REPLY
            reply = reply_to.encode()
        if type_ is not None:
            flags |= _HAS_TYPE
            type_bytes = type_.encode()
        if properties:
            return b"".join(
                (
                    _CONTENT.pack(
                        priority,
                        flags,
                        _KIND_INDEX[kind],
                        len(id_bytes),
                        len(corr),
                        len(reply),
                        len(type_bytes),
                        len(properties),
                    ),
                    id_bytes,
                    corr,
                    reply,
                    type_bytes,
                    _encode_properties(properties),
                    body,
                )
            )
        head = _CONTENT.pack(
            priority,
            flags,
            _KIND_INDEX[kind],
            len(id_bytes),
            len(corr),
            len(reply),
            len(type_bytes),
            0,
        )
        return b"".join((head, id_bytes, corr, reply, type_bytes, body))
    except ENCODE_ERRORS as exc:
        raise LocalProtocolError(f"message cannot be encoded: {exc}") from exc


_decoded: Final = Message.decoded


def decode_content(  # noqa: PLR0917 - hot path, called positionally
    data: bytes,
    start: int,
    end: int,
    max_properties: int = DEFAULT_MAX_PROPERTIES,
    timestamp: int = 0,
    expiration: int = 0,
    delivery_count: int = 0,
    redelivered: bool = False,
) -> Message:
    """The message whose content block is ``data[start:end]``, with the given broker fields.

    Raises:
        RemoteProtocolError: the block is malformed (callers may also see struct.error,
            UnicodeDecodeError, ValueError... when calling this directly; the codec maps them).
    """
    priority, flags, kind, id_len, corr_len, reply_len, type_len, n_props = _CONTENT.unpack_from(
        data, start
    )
    p = start + _CONTENT_SIZE
    q = p + id_len
    message_id = data[p:q].decode()
    correlation_id = reply_to = type_ = None
    if flags & _OPTIONAL_STRINGS or corr_len or reply_len or type_len:
        if flags & _HAS_CORR:
            p, q = q, q + corr_len
            correlation_id = data[p:q].decode()
        elif corr_len:
            raise malformed("absent correlation id with a length")
        if flags & _HAS_REPLY:
            p, q = q, q + reply_len
            reply_to = data[p:q].decode()
        elif reply_len:
            raise malformed("absent reply-to with a length")
        if flags & _HAS_TYPE:
            p, q = q, q + type_len
            type_ = data[p:q].decode()
        elif type_len:
            raise malformed("absent type with a length")
    properties: dict[str, PropertyValue] = {}
    if n_props:
        if n_props > max_properties:
            raise RemoteProtocolError(
                f"message has {n_props} properties, the limit is {max_properties}",
                "too-many-properties",
            )
        q = _decode_properties(data, q, n_props, properties)
    if q > end or priority > 9 or flags > _KNOWN_FLAGS:
        raise malformed("message content overruns its block or has a bad priority or flags")
    return _decoded(
        data[q:end],
        message_id,
        priority,
        timestamp,
        expiration,
        correlation_id,
        reply_to,
        type_,
        flags & _PERSISTENT == 1,
        redelivered,
        delivery_count,
        properties,
        _KINDS[kind],
        None,
    )


def content_size(data: bytes, start: int, end: int) -> int:
    """The ``Message.size`` of the message whose content block is ``data[start:end]``,
    without decoding it: what lazy recovery counts a queue's bytes with.

    Raises:
        RemoteProtocolError: the block is malformed (struct.error, UnicodeDecodeError or
            IndexError too, as :func:`decode_content`).
    """
    _, _, _, id_len, corr_len, reply_len, type_len, n_props = _CONTENT.unpack_from(data, start)
    q: int = start + _CONTENT_SIZE + id_len + corr_len + reply_len + type_len
    if not n_props:
        return SIZE_OVERHEAD + (end - q) if q <= end else _overrun()
    properties = 0
    head = _PROP_HEAD.unpack_from
    decoders = _VALUE_DECODERS
    for _ in range(n_props):
        tag, name_len = head(data, q)
        p = q + 3
        q = p + name_len
        raw = data[p:q]
        properties += len(raw) if raw.isascii() else len(raw.decode())
        decoder = decoders[tag]
        if decoder is None:
            if tag != PropertyType.STRING:
                raise malformed(f"unknown property type tag {tag}")
            (length,) = _U32.unpack_from(data, q)
            p = q + 4
            q = p + length
            raw = data[p:q]
            properties += len(raw) if raw.isascii() else len(raw.decode())
        else:
            properties += 8  # as Message.size counts any value but a string
            q += decoder[0].size
    if q > end:
        _overrun()
    return SIZE_OVERHEAD + (end - q) + properties


def _overrun() -> int:
    raise malformed("message content overruns its block")


def _decode_properties(
    data: bytes, q: int, count: int, properties: dict[str, PropertyValue]
) -> int:
    decoders = _VALUE_DECODERS
    for _ in range(count):
        tag, name_len = _PROP_HEAD.unpack_from(data, q)
        p = q + 3
        q = p + name_len
        name = data[p:q].decode()
        decoder = decoders[tag]
        if decoder is None:
            if tag != PropertyType.STRING:
                raise malformed(f"unknown property type tag {tag}")
            (length,) = _U32.unpack_from(data, q)
            p = q + 4
            q = p + length
            properties[name] = data[p:q].decode()
        else:
            st, wrap = decoder
            (value,) = st.unpack_from(data, q)
            properties[name] = wrap(value)
            q += st.size
    return q
