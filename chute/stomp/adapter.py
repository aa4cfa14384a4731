"""STOMP ⇄ core mapping, pure: frames and headers to messages and options, and back.

No sockets and no broker here: the driver (:mod:`chute.server.stomp`) calls
these functions and does the I/O. Each choice below is what a user of
ActiveMQ or RabbitMQ would expect, written down once:

* Destinations: ``/queue/NAME`` → ``queue:NAME``, ``/topic/NAME`` →
  ``topic:NAME``, ``/stream/NAME`` → ``stream:NAME`` (DESIGN.md §Addresses);
  chute's own ``queue:NAME``, ``topic:NAME``, ``stream:NAME`` and a bare
  ``NAME`` are accepted too. ``/temp-queue/NAME`` is
  resolved by the driver (it is scoped to the connection).
* ``persistent`` defaults to **true**, as every chute message does
  (DESIGN.md §The message); send ``persistent:false`` for a transient message.
  A persistent SEND's RECEIPT comes only after the journal's fsync.
* ``expires`` is an absolute time in ms since the epoch (ActiveMQ);
  ``expiration`` a time to live in ms counted from acceptance (RabbitMQ).
* ``content-type`` travels as a string property of that name; a ``text/*``
  content type makes the message's kind ``text``.
* Any other SEND header becomes a string property (STOMP has no typed
  headers); on the way out each property becomes a header holding its plain
  value, as ActiveMQ and RabbitMQ render JMS typed properties: ``true``/``false``
  for booleans, the decimal text for integers of every width (``-128``, not
  ``Byte(-128)``), and for floating point the shortest text that reads back as
  the same value at the property's own width (a 32-bit float ``1.1`` is
  ``1.1``), with Java's ``NaN``, ``Infinity`` and ``-Infinity``, which Java,
  JavaScript and Python all parse.
* MESSAGE frames carry ``chute-delivery-count`` (1 on the first delivery).
* Streams, as RabbitMQ's STOMP plugin reads them: a SUBSCRIBE's
  ``x-stream-offset`` header says where a reader starts (``first``, ``last``,
  ``next``, ``offset=N``, ``timestamp=T`` in seconds or ms; none: ``next``), and
  each MESSAGE from a stream carries ``x-stream-offset: N``, the message's
  offset. That header name is the broker's on MESSAGE frames: a property of that
  name is not copied out.
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from chute.core.model.address import canonical, parse
from chute.core.model.consumer import AckMode
from chute.core.model.offsets import parse_offset
from chute.errors import ConsumerError, InvalidAddress, InvalidMessage, RemoteProtocolError
from chute.message import BodyKind, Float, Message, PropertyValue, check_priority, new_message_id
from chute.stomp.frames import SUPPORTED_VERSIONS, Frame

DELIVERY_COUNT_HEADER: Final = "chute-delivery-count"
STREAM_OFFSET_HEADER: Final = "x-stream-offset"
"""SUBSCRIBE: where a stream reader starts; MESSAGE: the message's offset (RabbitMQ's name)."""
TEMP_QUEUE_PREFIX: Final = "/temp-queue/"
DEFAULT_PREFETCH: Final = 1000
"""The window of a subscription that names no prefetch header (ActiveMQ's default)."""

# SEND headers that are fields or instructions, never properties.
_SEND_FIELDS: Final = frozenset(
    (
        "destination",
        "transaction",
        "receipt",
        "content-length",
        "persistent",
        "priority",
        "expires",
        "expiration",
        "correlation-id",
        "reply-to",
        "type",
        "message-id",
        "timestamp",
        "redelivered",
        "subscription",
        "ack",
        DELIVERY_COUNT_HEADER,
    )
)
# Properties with these names would shadow a MESSAGE frame's own headers: not copied out.
_MESSAGE_HEADERS: Final = (_SEND_FIELDS - {"content-type"}) | {STREAM_OFFSET_HEADER}


class AckToken:
    """The ``ack`` header of a MESSAGE frame: ``<consumer>.<seq>`` (opaque to clients)."""

    @staticmethod
    def make(consumer_id: int, seq: int) -> str:
        return f"{consumer_id}.{seq}"

    @staticmethod
    def prefix(consumer_id: int) -> str:
        """What every token of ``consumer_id`` starts with (the sequence number follows)."""
        return f"{consumer_id}."

    @staticmethod
    def parse(token: str) -> tuple[int, int]:
        """Raises ConsumerError: not a token this broker handed out."""
        consumer, _, seq = token.partition(".")
        if consumer.isdigit() and seq.isdigit():
            return int(consumer), int(seq)
        raise ConsumerError(f"unknown ack id {token[:60]!r}")


def negotiate_version(accept_version: str | None) -> str | None:
    """The highest version both sides speak, or None. No header means 1.0 (§Protocol
    Negotiation)."""
    if accept_version is None:
        return "1.0"
    offered = {v.strip() for v in accept_version.split(",")}
    common = [v for v in SUPPORTED_VERSIONS if v in offered]
    return common[-1] if common else None


def require(frame: Frame, name: str) -> str:
    """The header ``name`` of ``frame``.

    Raises:
        RemoteProtocolError: it is missing ('missing-header'); the frame cannot be served.
    """
    value = frame.header(name)
    if value is None:
        raise RemoteProtocolError(
            f"a {frame.command} frame needs a {name!r} header", "missing-header"
        )
    return value


def is_temp_queue(destination: str) -> bool:
    return destination.startswith(TEMP_QUEUE_PREFIX)


def to_address(destination: str) -> str:
    """A STOMP destination (not a temporary queue) as a core address.

    Raises:
        InvalidAddress: an unknown prefix or a bad name.
    """
    if destination.startswith("/") and not destination.startswith(
        ("/queue/", "/topic/", "/stream/")
    ):
        raise InvalidAddress(
            f"destination {destination[:60]!r} is not /queue/NAME, /topic/NAME, "
            "/stream/NAME or /temp-queue/NAME"
        )
    return canonical(destination)


def to_destination(address: str) -> str:
    """A core address as a STOMP destination (``queue:x`` → ``/queue/x``); other text as is."""
    try:
        addr = parse(address)
    except InvalidAddress:
        return address
    return f"/{addr.kind.value}/{addr.name}"


def _int_header(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidMessage(f"header {name}:{value[:40]!r} is not an integer") from None
    if number < 0:
        raise InvalidMessage(f"header {name} must not be negative")
    return number


class SendFrame(NamedTuple):
    """What a SEND frame asks for: where, how, and the message it carries."""

    destination: str
    reply_to: str | None
    """As the client wrote it: the driver resolves it and sets ``message.reply_to``."""
    transaction: str | None
    receipt: str | None
    message: Message
    ttl: int
    """The time to live in ms (``expiration``), 0 for none."""


# The SEND headers _send_headers looks at, by their place in its list of first values;
# the other _SEND_FIELDS share the last place, which nothing reads.
_SEND_SLOTS: Final = (
    "destination",
    "transaction",
    "receipt",
    "persistent",
    "priority",
    "expires",
    "expiration",
    "correlation-id",
    "reply-to",
    "type",
)
_SEND_INDEX: Final = {name: i for i, name in enumerate(_SEND_SLOTS)} | {
    name: len(_SEND_SLOTS) for name in _SEND_FIELDS - set(_SEND_SLOTS)
}


class _SendHeaders(NamedTuple):
    """A SEND frame's headers, read and checked: everything but the body and the id."""

    destination: str
    reply_to: str | None
    transaction: str | None
    receipt: str | None
    priority: int
    expiration: int
    correlation_id: str | None
    type: str | None
    persistent: bool
    properties: dict[str, PropertyValue]
    kind: BodyKind
    ttl: int


def _send_headers(headers: tuple[tuple[str, str], ...]) -> _SendHeaders:
    first: list[str | None] = [None] * (len(_SEND_SLOTS) + 1)
    properties: dict[str, PropertyValue] = {}
    index = _SEND_INDEX.get
    for name, value in headers:
        i = index(name)
        if i is None:
            if name not in properties:
                properties[name] = value
        elif first[i] is None:
            first[i] = value
    (
        destination,
        transaction,
        receipt,
        persistent_text,
        priority_text,
        expires,
        expiration,
        correlation_id,
        reply_to,
        type_,
        _,
    ) = first
    if destination is None:
        raise RemoteProtocolError("a SEND frame needs a 'destination' header", "missing-header")
    persistent = True
    if persistent_text is not None:
        lowered = persistent_text.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidMessage(f"persistent must be true or false, not {persistent_text[:20]!r}")
        persistent = lowered == "true"
    priority = (
        4 if priority_text is None else check_priority(_int_header("priority", priority_text))
    )
    content_type = properties.get("content-type")
    kind = (
        BodyKind.TEXT
        if isinstance(content_type, str) and content_type.startswith("text/")
        else BodyKind.BYTES
    )
    return _SendHeaders(
        destination,
        reply_to,
        transaction,
        receipt,
        priority,
        0 if expires is None else _int_header("expires", expires),
        correlation_id,
        type_,
        persistent,
        properties,
        kind,
        0 if expiration is None else _int_header("expiration", expiration),
    )


class SendReader:
    """Reads SEND frames, one pass over their headers (the first of each name counts).

    It remembers the last header tuple it read: the codec hands out the same
    tuple for a header block it has seen before, so the SENDs of a producer
    that repeats its headers are read once, and each after that only gets its
    message built. One per connection; not thread-safe.
    """

    __slots__ = ("_headers", "_read")

    def __init__(self) -> None:
        self._headers: tuple[tuple[str, str], ...] | None = None
        self._read: _SendHeaders | None = None

    def read(self, frame: Frame) -> SendFrame:
        """The SEND frame's request; its message has a new id, ``reply_to`` is left to the driver.

        Raises:
            RemoteProtocolError: no ``destination`` ('missing-header').
            InvalidMessage: a bad ``priority``, ``expires``, ``expiration`` or ``persistent``.
        """
        headers = frame.headers
        read = self._read
        if headers is not self._headers or read is None:
            read = self._read = _send_headers(headers)
            self._headers = headers
        message = Message.decoded(
            frame.body,
            new_message_id(),
            read.priority,
            0,
            read.expiration,
            read.correlation_id,
            None,
            read.type,
            read.persistent,
            False,
            0,
            dict(read.properties) if read.properties else {},  # each message owns its own
            read.kind,
            None,
        )
        return SendFrame(
            read.destination, read.reply_to, read.transaction, read.receipt, message, read.ttl
        )


def property_text(value: PropertyValue) -> str:
    """A property value as a header's text: its plain value, whatever its JMS type.

    ``str()`` is not that: the narrow types' ``repr`` (``Byte(-128)``) is also
    their ``str``.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, Float):
        return _float_text(value)
    if isinstance(value, float):
        return _double_text(value)
    return value


_SINGLE: Final = struct.Struct(">f")
_SINGLE_DIGITS: Final = 9
"""Significant digits that always tell two 32-bit floats apart."""


def _double_text(value: float) -> str:
    """A double's shortest round-trip text; Java's names for the non-finite values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _float_text(value: float) -> str:
    """A 32-bit float's shortest text that reads back as the same 32-bit float.

    A float property that crossed the native wire holds the 32-bit value as a
    double (``1.100000023841858`` for ``1.1``); Java's ``Float.toString`` shows
    ``1.1``, and so does this.
    """
    single = _as_single(value)
    if not math.isfinite(single):
        return _double_text(single)
    for digits in range(1, _SINGLE_DIGITS):
        shorter = float(f"{single:.{digits}g}")
        if _as_single(shorter) == single:
            return float.__repr__(shorter)
    return float.__repr__(float(f"{single:.{_SINGLE_DIGITS}g}"))


def _as_single(value: float) -> float:
    """``value`` rounded to 32 bits; infinite beyond their range, as Java's cast gives."""
    try:
        single: float = _SINGLE.unpack(_SINGLE.pack(value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return single


def message_frame(
    message: Message,
    *,
    destination: str,
    subscription: str,
    ack: str | None,
    delivery_count: int,
    redelivered: bool,
    version: str,
    stream_offset: int | None = None,
) -> Frame:
    """The MESSAGE frame delivering ``message`` on one subscription (with
    ``x-stream-offset`` if ``stream_offset`` is given: the subscription reads a stream).

    In STOMP 1.0 headers cannot be escaped, so a header of the message whose
    name or value holds a line break (or whose name holds ``:``) is left out.
    The broker's hot path writes the same bytes with
    :class:`chute.stomp.delivery.MessageEncoder`.
    """
    headers: list[tuple[str, str]] = [
        ("redelivered", "true" if redelivered else "false"),
        (DELIVERY_COUNT_HEADER, str(delivery_count)),
    ]
    if stream_offset is not None:
        headers.append((STREAM_OFFSET_HEADER, str(stream_offset)))
    headers += [
        ("priority", str(message.priority)),
        ("timestamp", str(message.timestamp)),
        ("expires", str(message.expiration)),
        ("persistent", "true" if message.persistent else "false"),
    ]
    extra = optional_headers(message)
    if message.properties:
        extra.extend(property_headers(message.properties, version))
    if version == "1.0":
        extra = [(name, value) for name, value in extra if _unescaped_ok(name, value)]
    headers.extend(extra)
    return Frame.message(
        destination, message.id, subscription, message.body, ack=ack, headers=headers
    )


def _unescaped_ok(name: str, value: str) -> bool:
    """Whether a header can be written in STOMP 1.0, which has no escapes."""
    return not (":" in name or "\n" in name or "\r" in name or "\n" in value or "\r" in value)


def optional_headers(message: Message) -> list[tuple[str, str]]:
    """A MESSAGE frame's headers for the message's optional fields, in frame order."""
    headers: list[tuple[str, str]] = []
    if message.correlation_id is not None:
        headers.append(("correlation-id", message.correlation_id))
    if message.reply_to is not None:
        headers.append(("reply-to", to_destination(message.reply_to)))
    if message.type is not None:
        headers.append(("type", message.type))
    if message.kind is BodyKind.TEXT and "content-type" not in message.properties:
        headers.append(("content-type", "text/plain;charset=utf-8"))
    return headers


def property_headers(properties: dict[str, PropertyValue], version: str) -> list[tuple[str, str]]:
    """A MESSAGE frame's headers for ``properties`` (those a 1.0 frame can carry)."""
    headers = []
    for name, value in properties.items():
        if name in _MESSAGE_HEADERS or name == "content-length":
            continue
        text = property_text(value)
        if version == "1.0" and not _unescaped_ok(name, text):
            continue
        headers.append((name, text))
    return headers


class StompAck(enum.Enum):
    """A SUBSCRIBE frame's ``ack`` header (§SUBSCRIBE ack Header)."""

    AUTO = "auto"
    CLIENT = "client"
    CLIENT_INDIVIDUAL = "client-individual"

    @property
    def core(self) -> AckMode:
        return _CORE_ACK[self]


_CORE_ACK: Final = {
    StompAck.AUTO: AckMode.AUTO,
    StompAck.CLIENT: AckMode.CLIENT,
    StompAck.CLIENT_INDIVIDUAL: AckMode.INDIVIDUAL,
}


@dataclass(frozen=True, slots=True)
class SubscribeOptions:
    """What a SUBSCRIBE frame asks for, checked."""

    id: str
    destination: str
    ack: StompAck
    prefetch: int
    selector: str | None
    name: str | None
    durable: bool
    shared: bool
    offset: str | None = None
    """``x-stream-offset`` as the client wrote it (checked): where a stream reader starts."""


STREAM_OFFSET_FORMS: Final = (
    "first, last, next, offset=N (N: an offset, 0 or more) "
    "or timestamp=T (T: seconds or milliseconds since the epoch)"
)


def stream_offset(value: str | None) -> str | None:
    """A SUBSCRIBE's ``x-stream-offset`` header, checked; None (no header) means ``next``.

    The text itself goes to the core (:func:`chute.core.model.offsets.parse_offset` reads it
    again), so a timestamp in seconds is told apart from one in ms there, once.

    Raises:
        ConsumerError: not one of the forms RabbitMQ's STOMP plugin takes; says them.
    """
    if value is None:
        return None
    try:
        parse_offset(value)
    except ConsumerError:
        raise ConsumerError(
            f"{STREAM_OFFSET_HEADER} must be {STREAM_OFFSET_FORMS}, not {value[:60]!r}"
        ) from None
    return value


def subscribe_options(frame: Frame, version: str) -> SubscribeOptions:
    """Read a SUBSCRIBE frame.

    ``id`` is required from STOMP 1.1 on; a 1.0 subscription without one is
    named by its destination. The window is ``activemq.prefetchSize`` or
    ``prefetch-count`` (RabbitMQ), else :data:`DEFAULT_PREFETCH`. A durable
    topic subscription is named by ``durable-subscription-name`` or
    ``activemq.subscriptionName``; ``shared-subscription-name`` names a shared one
    (durable too if ``durable:true``). ``x-stream-offset`` is where a stream reader
    starts (:func:`stream_offset`).

    Raises:
        RemoteProtocolError: no ``destination`` (or, 1.1+, no ``id``).
        ConsumerError: an unknown ``ack`` mode, a bad prefetch or a bad offset.
    """
    destination = require(frame, "destination")
    sub_id = frame.header("id")
    if sub_id is None:
        if version != "1.0":
            raise RemoteProtocolError("a SUBSCRIBE frame needs an 'id' header", "missing-header")
        sub_id = destination
    ack_text = frame.header("ack") or "auto"
    try:
        ack = StompAck(ack_text)
    except ValueError:
        raise ConsumerError(
            f"ack mode {ack_text[:40]!r} is not auto, client or client-individual"
        ) from None
    prefetch = DEFAULT_PREFETCH
    for header in ("activemq.prefetchSize", "prefetch-count"):
        value = frame.header(header)
        if value is not None:
            if not value.strip().isdigit() or int(value) < 1:
                raise ConsumerError(f"{header} must be a positive integer, not {value[:20]!r}")
            prefetch = int(value)
            break
    durable_name = frame.header("durable-subscription-name") or frame.header(
        "activemq.subscriptionName"
    )
    shared_name = frame.header("shared-subscription-name")
    if shared_name:
        name: str | None = shared_name
        durable = (frame.header("durable") or "").lower() == "true"
        shared = True
    else:
        name = durable_name or None
        durable = name is not None
        shared = False
    return SubscribeOptions(
        sub_id,
        destination,
        ack,
        prefetch,
        frame.header("selector") or None,
        name,
        durable,
        shared,
        stream_offset(frame.header(STREAM_OFFSET_HEADER)),
    )
