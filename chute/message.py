"""The message: headers, typed properties and an opaque body.

This is DESIGN.md's table made code. A :class:`Message` is treated as immutable
once the broker has accepted it (use :meth:`Message.replace` for a changed
copy): the same object sits in every queue of a topic's fan-out. What changes
per delivery (``redelivered``, ``delivery_count``) is set on the copy a
consumer is handed, never on the stored one.

Typed properties keep their JMS type through every hop. Python's ``bool``,
``int``, ``float`` and ``str`` map to boolean, long, double and string; the
narrower JMS types are the int/float subclasses :class:`Byte`, :class:`Short`,
:class:`Int` and :class:`Float`, which behave as numbers everywhere (selectors
included) and only tell the codecs which type to write.
"""

from __future__ import annotations

import enum
import itertools
import os
import time
from collections.abc import Mapping
from typing import Any, Final

from chute.errors import InvalidMessage

DEFAULT_PRIORITY: Final = 4
MAX_ID_LENGTH: Final = 256
MAX_PROPERTY_NAME_LENGTH: Final = 256


class BodyKind(enum.Enum):
    """The six JMS body kinds; the letter is DropboxMQ's code for each."""

    MESSAGE = "message"
    BYTES = "bytes"
    TEXT = "text"
    MAP = "map"
    STREAM = "stream"
    OBJECT = "object"

    @property
    def letter(self) -> str:
        return _KIND_LETTERS[self]

    @classmethod
    def from_letter(cls, letter: str) -> BodyKind:
        try:
            return _LETTER_KINDS[letter]
        except KeyError:
            raise InvalidMessage(f"unknown body kind letter {letter!r}") from None


_KIND_LETTERS: Final = {
    BodyKind.MESSAGE: "M",
    BodyKind.BYTES: "B",
    BodyKind.TEXT: "T",
    BodyKind.MAP: "P",
    BodyKind.STREAM: "S",
    BodyKind.OBJECT: "O",
}
_LETTER_KINDS: Final = {v: k for k, v in _KIND_LETTERS.items()}


class PropertyType(enum.IntEnum):
    """JMS property types; the numbers are stable wire tags."""

    BOOLEAN = 1
    BYTE = 2
    SHORT = 3
    INT = 4
    LONG = 5
    FLOAT = 6
    DOUBLE = 7
    STRING = 8


class _BoundedInt(int):
    bits: int = 64

    def __new__(cls, value: int) -> _BoundedInt:
        v = int(value)
        lo, hi = -(1 << (cls.bits - 1)), (1 << (cls.bits - 1)) - 1
        if not lo <= v <= hi:
            raise InvalidMessage(f"{v} does not fit a JMS {cls.__name__.lower()} ({lo}..{hi})")
        return super().__new__(cls, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"

    __str__ = int.__repr__  # its text is the plain number (a STOMP header, a Spark column)


class Byte(_BoundedInt):
    """A JMS byte property value (8-bit signed)."""

    bits = 8


class Short(_BoundedInt):
    """A JMS short property value (16-bit signed)."""

    bits = 16


class Int(_BoundedInt):
    """A JMS int property value (32-bit signed)."""

    bits = 32


class Long(_BoundedInt):
    """A JMS long property value (64-bit signed); plain ``int`` means the same."""

    bits = 64


class Float(float):
    """A JMS float property value (32-bit); plain ``float`` means double."""

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"

    __str__ = float.__repr__  # its text is the plain number


PropertyValue = bool | int | float | str

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def property_type(value: object) -> PropertyType:
    """The JMS type a property value keeps on the wire.

    Raises:
        InvalidMessage: the value is not one of the eight JMS types.
    """
    if isinstance(value, bool):
        return PropertyType.BOOLEAN
    if isinstance(value, int):
        if isinstance(value, Byte):
            return PropertyType.BYTE
        if isinstance(value, Short):
            return PropertyType.SHORT
        if isinstance(value, Int):
            return PropertyType.INT
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise InvalidMessage(f"integer property {value} does not fit a JMS long")
        return PropertyType.LONG
    if isinstance(value, float):
        return PropertyType.FLOAT if isinstance(value, Float) else PropertyType.DOUBLE
    if isinstance(value, str):
        return PropertyType.STRING
    raise InvalidMessage(
        f"property value {value!r} of type {type(value).__name__} is not a JMS type "
        "(use bool, int, float, str, or chute.message.Byte/Short/Int/Float)"
    )


def typed_value(kind: PropertyType, value: PropertyValue) -> PropertyValue:
    """Wrap ``value`` so that it keeps JMS type ``kind`` (the inverse of :func:`property_type`)."""
    match kind:
        case PropertyType.BOOLEAN:
            return bool(value)
        case PropertyType.BYTE:
            return Byte(int(value))
        case PropertyType.SHORT:
            return Short(int(value))
        case PropertyType.INT:
            return Int(int(value))
        case PropertyType.LONG:
            return int(value)
        case PropertyType.FLOAT:
            return Float(float(value))
        case PropertyType.DOUBLE:
            return float(value)
        case PropertyType.STRING:
            return str(value)


def check_properties(properties: Mapping[str, Any]) -> dict[str, PropertyValue]:
    """Validate property names and values; returns a plain dict copy.

    Raises:
        InvalidMessage: a name is empty or too long, or a value has no JMS type.
    """
    checked: dict[str, PropertyValue] = {}
    for name, value in properties.items():
        if not isinstance(name, str) or not name or len(name) > MAX_PROPERTY_NAME_LENGTH:
            raise InvalidMessage(f"property name {name!r} must be 1-256 characters")
        property_type(value)
        checked[name] = value
    return checked


KEY_PROPERTY: Final = "key"
"""The string property that holds a message's key (:attr:`Message.key`): on a stream
with partitions it picks the partition. A property, so every protocol, client and
journal carries it as it is (STOMP: the ``key`` header)."""

GENERATED_ID_SIZE: Final = 32
"""Characters in a generated message id (16 bytes as hex)."""
_ID_MASK: Final = 0xFFFF_FFFF_FFFF  # 48 bits
_time_ns: Final = time.time_ns


class MessageIds:
    """The process's message ids: 16 time-ordered bytes as 32 lowercase hex digits.

    Layout: a 48-bit ms clock, 32 random bits per process, a 48-bit counter
    (randomly started). Unique within a process (the counter), unlikely to
    collide across processes (the random part), and sortable by creation time
    to the millisecond. The broker, its adapters and both client drivers take
    their ids from the one instance, :data:`new_message_id`.

    Thread-safe: the counter's ``next`` is atomic, and the clock's hex prefix
    is cached as one (ms, prefix) tuple, swapped whole. Fork-safe: a forked
    child draws new random bits and a new counter before it runs, so it never
    repeats its parent's ids.
    """

    __slots__ = ("_counter", "_node", "_stamp")

    def __init__(self) -> None:
        self._reseed()
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._node = int.from_bytes(os.urandom(4), "big")
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._stamp: tuple[int, bytes] = (-1, b"")

    def next_bytes(self) -> bytes:
        """A new id as :data:`GENERATED_ID_SIZE` ASCII bytes (the client's hot path packs
        these as they are)."""
        ms = _time_ns() // 1_000_000
        stamp = self._stamp
        if stamp[0] != ms:
            stamp = self._stamp = (ms, b"%012x%08x" % (ms & _ID_MASK, self._node))
        return stamp[1] + b"%012x" % (next(self._counter) & _ID_MASK)

    def __call__(self) -> str:
        """A new id."""
        return self.next_bytes().decode()


new_message_id: Final = MessageIds()
"""``new_message_id()``: a new message id; see :class:`MessageIds`."""


def now_ms() -> int:
    """Milliseconds since the epoch, the unit of ``timestamp`` and ``expiration``."""
    return time.time_ns() // 1_000_000


def check_id(message_id: str) -> str:
    """Validate a producer-supplied message id.

    Raises:
        InvalidMessage: empty, longer than 256 characters, or containing control characters.
    """
    if not message_id or len(message_id) > MAX_ID_LENGTH:
        raise InvalidMessage("message id must be 1-256 characters")
    if not message_id.isprintable():
        raise InvalidMessage("message id must not contain control characters")
    return message_id


# Rough fixed cost of a message's headers, counted into ``size`` so that a
# queue of empty bodies still has a byte bound.
_HEADER_OVERHEAD: Final = 64
SIZE_OVERHEAD: Final = _HEADER_OVERHEAD
"""What ``Message.size`` counts for a message's headers, besides its body and properties."""


class Message:
    """One message. See the module docstring for the immutability rule."""

    __slots__ = (
        "body",
        "correlation_id",
        "delivery_count",
        "encoded",
        "expiration",
        "id",
        "kind",
        "persistent",
        "priority",
        "properties",
        "redelivered",
        "reply_to",
        "size",
        "timestamp",
        "type",
    )

    def __init__(
        self,
        body: bytes = b"",
        *,
        id: str = "",  # the field's name in DESIGN.md
        priority: int = DEFAULT_PRIORITY,
        timestamp: int = 0,
        expiration: int = 0,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,  # the field's name in DESIGN.md
        persistent: bool = True,
        redelivered: bool = False,
        delivery_count: int = 0,
        properties: dict[str, PropertyValue] | None = None,
        kind: BodyKind = BodyKind.BYTES,
    ) -> None:
        self.id = id
        self.priority = priority
        self.timestamp = timestamp
        self.expiration = expiration
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.type = type
        self.persistent = persistent
        self.redelivered = redelivered
        self.delivery_count = delivery_count
        self.properties: dict[str, PropertyValue] = properties if properties is not None else {}
        self.kind = kind
        self.body = body
        self.size = (
            _HEADER_OVERHEAD
            + len(body)
            + (_properties_size(self.properties) if self.properties else 0)
        )
        # The wire codec's encoding of the producer-chosen fields (everything but
        # timestamp, expiration and the delivery fields), kept so the broker can
        # forward a message without encoding it again. A codec sets it; a changed
        # copy (replace) starts without it.
        self.encoded: bytes | None = None

    @classmethod
    def decoded(  # noqa: PLR0917 - positional on purpose: codecs call it per message
        cls,
        body: bytes,
        id: str,
        priority: int,
        timestamp: int,
        expiration: int,
        correlation_id: str | None,
        reply_to: str | None,
        type: str | None,
        persistent: bool,
        redelivered: bool,
        delivery_count: int,
        properties: dict[str, PropertyValue],
        kind: BodyKind,
        encoded: bytes | None,
    ) -> Message:
        """The constructor for wire codecs: positional, no defaults, ``encoded`` kept.

        Codecs build one message per packet on the broker's hot path, where
        keyword-argument parsing alone costs more than the rest of the decode.
        """
        m = _new_message(cls)
        m.body = body
        m.id = id
        m.priority = priority
        m.timestamp = timestamp
        m.expiration = expiration
        m.correlation_id = correlation_id
        m.reply_to = reply_to
        m.type = type
        m.persistent = persistent
        m.redelivered = redelivered
        m.delivery_count = delivery_count
        m.properties = properties
        m.kind = kind
        m.encoded = encoded
        m.size = _HEADER_OVERHEAD + len(body) + (_properties_size(properties) if properties else 0)
        return m

    @classmethod
    def create(
        cls,
        body: bytes | bytearray | memoryview | str = b"",
        *,
        id: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        ttl: int = 0,
        expiration: int = 0,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
        persistent: bool = True,
        properties: Mapping[str, Any] | None = None,
        kind: BodyKind | None = None,
        key: str | None = None,
    ) -> Message:
        """Build a validated message as a producer would.

        ``key``: the message's key (:attr:`key`), kept as the string property ``key``.

        A ``str`` body is UTF-8 encoded and makes the kind ``text`` unless
        ``kind`` says otherwise. ``ttl`` (ms) becomes an expiration counted from
        now, as a JMS producer computes it at send time; a broker's ``send(...,
        ttl=)`` instead counts from the moment the broker accepts the message.

        Raises:
            InvalidMessage: a field is out of range or of the wrong type, or both
                ``ttl`` and ``expiration`` are given.
        """
        if isinstance(body, str):
            data = body.encode("utf-8")
            kind = kind or BodyKind.TEXT
        elif isinstance(body, bytes | bytearray | memoryview):
            data = bytes(body)
        else:  # (the ``type`` parameter shadows the builtin here)
            raise InvalidMessage(f"body must be bytes or str, not {body.__class__.__name__}")
        check_priority(priority)
        if ttl < 0 or expiration < 0:
            raise InvalidMessage("ttl and expiration must not be negative")
        if ttl and expiration:
            raise InvalidMessage("give ttl or expiration, not both")
        if ttl:
            expiration = now_ms() + ttl
        for name, value in (
            ("correlation_id", correlation_id),
            ("reply_to", reply_to),
            ("type", type),
        ):
            if value is not None and not isinstance(value, str):
                raise InvalidMessage(f"{name} must be a string or None")
        checked = check_properties(properties or {})
        if key is not None:
            if not isinstance(key, str):
                raise InvalidMessage(f"key must be a string or None, not {type(key).__name__}")
            checked[KEY_PROPERTY] = key
        return cls(
            data,
            id=check_id(id) if id is not None else new_message_id(),
            priority=priority,
            expiration=expiration,
            correlation_id=correlation_id,
            reply_to=reply_to,
            type=type,
            persistent=bool(persistent),
            properties=checked,
            kind=kind or BodyKind.BYTES,
        )

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed (the original is left as it was)."""
        fields = {
            name: getattr(self, name) for name in self.__slots__ if name not in ("size", "encoded")
        }
        fields.update(changes)
        if "properties" not in changes:
            fields["properties"] = dict(self.properties)
        body = fields.pop("body")
        return Message(body, **fields)

    @property
    def key(self) -> str | None:
        """The message's key (the string property ``key``), or None: on a stream with
        partitions, messages with the same key go to the same partition."""
        value = self.properties.get(KEY_PROPERTY)
        return None if value is None else str(value)

    def is_expired(self, now: int) -> bool:
        return 0 < self.expiration <= now

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (for ``text`` messages)."""
        return self.body.decode("utf-8")

    def headers_json(self) -> dict[str, Any]:
        """Headers and properties as JSON-ready data, without the body (the CLI's
        ``--json`` shape, and the admin API's). Property types are kept in
        ``property_types``."""
        return {
            "id": self.id,
            "priority": self.priority,
            "timestamp": self.timestamp,
            "expiration": self.expiration,
            "correlation_id": self.correlation_id,
            "reply_to": self.reply_to,
            "type": self.type,
            "persistent": self.persistent,
            "redelivered": self.redelivered,
            "delivery_count": self.delivery_count,
            "kind": self.kind.value,
            "properties": dict(self.properties),
            "property_types": {
                k: property_type(v).name.lower() for k, v in self.properties.items()
            },
        }

    def to_json(self) -> dict[str, Any]:
        """:meth:`headers_json` and the body: one that is valid UTF-8 as ``body``, any
        other as ``body_base64``."""
        import base64  # noqa: PLC0415 - only the CLI path needs it

        out = self.headers_json()
        try:
            out["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(self.body).decode("ascii")
        return out

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, priority={self.priority}, kind={self.kind.value}, "
            f"body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__ if n != "encoded")

    __hash__ = None  # type: ignore[assignment]


_new_message: Final = object.__new__


def check_priority(priority: int) -> int:
    """Raises InvalidMessage unless ``priority`` is an int in 0..9."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidMessage(f"priority must be an integer 0..9, got {priority!r}")
    return priority


def _properties_size(properties: Mapping[str, PropertyValue]) -> int:
    size = 0
    for name, value in properties.items():
        size += len(name) + (len(value) if isinstance(value, str) else 8)
    return size
