"""DropboxMQ 1.2 message filenames, both directions. Pure: no file I/O.

A DropboxMQ message is a file whose *name* holds every header and property and
whose content is the body. This module follows what the released DropboxMQ 1.2
source does, not its web page, so a file written
by a DropboxMQ client or by a shell script following its rules reads the same.

Theory of operation
-------------------
Decoding (:func:`decode_filename`) never raises. Everything up to the name's
first ``~`` is a claim prefix ``<enc(clientId)>~`` and is set aside
(:func:`~chute.dropbox.names.split_claim_name`), in whichever directory the file
is: DropboxMQ's consumer puts a recovered or rolled-back file back into
``target/`` with its prefix, and operators re-drive ``error/`` files that way.
The rest is cut at ``.`` into at most seven fields, the rest (dots included)
being the properties text::

    priority . id . class . expiration . correlation . replyTo . type . properties

Missing fields and trailing dots mean the same thing. Numbers are cut at their
first ``-`` and may start with ``+`` (so nothing negative parses). The id's
leading number is ``milliseconds * 1000 + sequence``. The message id is the
id field, URL-decoded, behind JMS's ``ID:`` prefix: DropboxMQ's
``JMSMessageID``, so a reply whose correlation id is the request's message id
matches at a DropboxMQ requester. A name whose priority is missing or not a
number, whose id is empty, whose class is not one of ``M B S P O T`` or whose
expiration does not parse is **foreign**: its message id is ``ID:`` and the
URL-decoded whole (unclaimed) name, its priority 4, its expiration 0 and its
timestamp the time of receipt (the whole name is not an id field, so its
leading digits are not read as a time); the correlation id, reply-to, type and
properties that did parse still apply. A class that is missing, or not one of
the six letters, means text.

Encoding (:func:`encode_filename`) writes
``priority.id.class[.expiration[.correlation[.replyTo[.type[.properties]]]]]``,
leaving out the fields after the last non-empty one. The id field is the
message id without its ``ID:`` prefix (an id without one is written whole, and
so reads back with it). Text is URL-encoded in the form style (space is
``+``; ``*``, ``-``, ``_`` kept), then ``.`` becomes ``%2E`` and ``~`` becomes
``%7E`` (:func:`~chute.dropbox.escape.enc`), so an encoded field
holds only ``A-Z a-z 0-9 * - _ + %``: never a separator of ours, never ``/``. A
property is ``enc(name) + letter + "=" + enc(value)``, pairs joined by ``&``. The
delivery count is the property ``JMSXDeliveryCountI``: the deliveries
attempted so far (a consumer that reads ``n`` delivers the message as
redelivered, for the ``n + 1``-th time).

A property whose name is not a Java identifier is **not written**
(:func:`~chute.dropbox.properties.lost_properties` lists them): DropboxMQ's
reader refuses such a name and drops every property after it, so writing it
would lose the others too.
``content-type`` (a STOMP header) is one; what it says, text or bytes, the
body kind already carries.

Where chute deliberately differs from DropboxMQ
-----------------------------------------------
Each difference keeps data DropboxMQ would lose or hang on, and is reported in
:attr:`DecodedName.notes` when it happens:

- A property value with a later ``=`` keeps the whole value (DropboxMQ drops
  from the second ``=`` on).
- A property whose name is not a Java identifier is kept, and so is every
  property after it (DropboxMQ silently drops them all). Only names chute's
  model cannot hold (empty, over 256 characters) are dropped, with a note.
- A name that says it was delivered before (``JMSXDeliveryCountI=n``, n > 0)
  is read as redelivered (DropboxMQ 1.2 never sets ``JMSRedelivered`` from a
  name); JMS says a message that may have been delivered before is.
- A ``%`` escape that does not decode (or decodes to invalid UTF-8) leaves that
  text literal (DropboxMQ throws, and the file stays in ``target/`` forever).
- A typed property whose value does not parse as its type (``countI=abc``,
  ``b1Y=300``) is kept as a string, with a note (DropboxMQ fails the message).
- A priority above 9 is read as 9: chute's priorities are JMS's 0..9
  (DropboxMQ keeps any ``int``).
- A reply-to with an empty name (``Q`` alone) is no reply-to: chute cannot
  address an empty name.
- Numbers are ASCII digits only (Java also accepts other Unicode digits).
- Bodies are not part of the name; text is UTF-8 (DropboxMQ used the platform
  charset) and map/stream/object bodies stay opaque bytes. DropboxMQ reads a
  map, stream or object body with Java's ``ObjectInputStream``, and its
  ``receive()`` throws (the file goes to ``error/``) on one that is not
  Java-serialized, so chute writes such a body only if it starts with Java's
  serialization header ``AC ED 00 05`` (:func:`check_body`); it never
  deserializes one.

What a name cannot carry
------------------------
- ``persistent``: a file is durable, so decoded messages are persistent.
- ``timestamp``: only the id's leading number holds it. A message whose id is
  not of the form ``<ms*1000+seq>-...`` is encoded with its id unchanged (JMS
  ids survive every hop) and read back with its time of receipt. A message
  with an empty id gets a new DropboxMQ id built from its timestamp (or now)
  and ``sequence``; :func:`dropbox_id` builds one for a producer that wants the
  timestamp to survive.
- An empty correlation id or type is the same as none.

Name length
-----------
A filename is at most 255 bytes on every common filesystem
(:data:`~chute.dropbox.names.NAME_MAX_BYTES`), and DropboxMQ's only limit is
that its *claimed* name, ``<enc(clientId)>~<name>``, fits: its consumer reads
any name it can claim. :func:`encode_filename` therefore **refuses** (raises
:class:`~chute.errors.InvalidMessage`) a name that would not fit once claimed,
the claim adding ``claim_room`` bytes (:func:`~chute.dropbox.names.claim_room`
of the client ids that will claim it: a subscription's directory names its
client, :func:`~chute.dropbox.names.subscription_claim_room`). Like DropboxMQ,
it reserves no room for a delivery count: the count goes into the name where it
fits. A consumer that finds no room for it acknowledges the file into
``processed/`` under the name it had, and sends a file it would redeliver to
``error/`` (a redelivery must carry its count, or the redelivery limit would
never be reached). It does not spill properties elsewhere: a spilled property
is one a DropboxMQ reader would never see, and a sidecar file would break the
single-rename atomicity of the protocol. :func:`decode_filename` accepts names
of any length.

The names of directories and of claimed files are not a message's:
:mod:`~chute.dropbox.names` holds their rules.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from chute.dropbox.escape import dec_or_literal, enc
from chute.dropbox.names import DEFAULT_CLAIM_ROOM, NAME_MAX_BYTES, split_claim_name
from chute.dropbox.properties import (
    DELIVERY_COUNT,
    INT_MAX,
    LONG_MAX,
    decode_properties,
    dropbox_number,
    encode_property,
    is_java_identifier,
    take_delivery_count,
)
from chute.errors import InvalidMessage
from chute.message import (
    DEFAULT_PRIORITY,
    MAX_PROPERTY_NAME_LENGTH,
    BodyKind,
    Message,
    PropertyValue,
    check_priority,
    now_ms,
)

__all__ = [
    "JAVA_SERIALIZED",
    "JMS_ID_PREFIX",
    "DecodedName",
    "check_body",
    "decode_filename",
    "dropbox_id",
    "encode_filename",
]

JMS_ID_PREFIX: Final = "ID:"
"""What JMS puts before every ``JMSMessageID``, and DropboxMQ before the id field."""

JAVA_SERIALIZED: Final = b"\xac\xed\x00\x05"
"""How a Java serialization stream begins (magic ``ACED``, version 5): the start of
every map, stream and object body DropboxMQ writes and reads."""
_ARTICLES: Final = {
    BodyKind.MAP: "a map",
    BodyKind.STREAM: "a stream",
    BodyKind.OBJECT: "an object",
}
_SERIALIZED_KINDS: Final = frozenset(_ARTICLES)

_FIELDS: Final = 7
_MAX_PRIORITY: Final = 9

# -- reply-to -----------------------------------------------------------------------------

_REPLY_KINDS: Final = {"Q": "queue:", "T": "topic:"}
_REPLY_PREFIXES: Final = (
    ("queue:", "Q"),
    ("topic:", "T"),
    ("/queue/", "Q"),
    ("/topic/", "T"),
)


def _decode_reply_to(text: str, notes: list[str]) -> str | None:
    if not text:
        return None
    prefix = _REPLY_KINDS.get(text[0])
    if prefix is None:
        notes.append(f"reply-to {text[:60]!r} is neither Q<queue> nor T<topic>: ignored")
        return None
    name = dec_or_literal(text[1:], "reply-to", notes)
    if not name:
        notes.append(f"reply-to {text!r} has an empty name: ignored")
        return None
    return prefix + name


def _encode_reply_to(reply_to: str) -> str:
    letter, name = "Q", reply_to  # a bare name is a queue, as in chute.core.model.address
    for prefix, prefix_letter in _REPLY_PREFIXES:
        if reply_to.startswith(prefix):
            letter, name = prefix_letter, reply_to[len(prefix) :]
            break
    if not name:
        raise InvalidMessage(f"reply-to {reply_to!r} has an empty destination name")
    return letter + enc(name)


# -- ids ----------------------------------------------------------------------------------


def dropbox_id(timestamp: int, sequence: int, random_part: int | None = None) -> str:
    """A DropboxMQ-style id: ``<13-digit ms><3-digit sequence>-<10-digit random>``.

    Its leading number carries ``timestamp`` and ``sequence % 1000`` to every
    DropboxMQ reader. ``random_part`` defaults to a fresh random number.
    """
    if timestamp < 0 or sequence < 0:
        raise InvalidMessage("timestamp and sequence must not be negative")
    if random_part is None:
        random_part = secrets.randbelow(10**10)
    return f"{timestamp:013d}{sequence % 1000:03d}-{random_part % 10**10:010d}"


def _id_time(id_text: str, receipt: int) -> tuple[int, int]:
    """(timestamp, sequence) from an id's leading ``ms*1000+seq`` number."""
    number = dropbox_number(id_text, LONG_MAX)
    if not number:  # 0 or no number: the time of receipt
        return receipt, 0
    return divmod(number, 1000)


# -- decoding -----------------------------------------------------------------------------

_LETTER_KINDS: Final = {kind.letter: kind for kind in BodyKind}


@dataclass(frozen=True, slots=True)
class DecodedName:
    """What one DropboxMQ filename holds. Build the message with :meth:`to_message`.

    ``name`` is the filename as found; ``claimed_by`` the client id of its
    claim prefix (None if it has none), which is not part of the message.
    ``id`` is the JMS message id (``ID:`` and the id field). ``priority`` is
    already clamped to 0..9; ``delivery_count`` comes from the
    ``JMSXDeliveryCount`` property (deliveries attempted so far) and is not left
    in ``properties``. ``notes`` says, for a person, what was read differently
    from the letter of the name (see the module docstring); it is empty for any
    name :func:`encode_filename` writes.
    """

    name: str
    claimed_by: str | None
    foreign: bool
    priority: int
    id: str
    timestamp: int
    sequence: int
    expiration: int
    kind: BodyKind
    correlation_id: str | None
    reply_to: str | None
    type: str | None
    delivery_count: int
    properties: dict[str, PropertyValue] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def sort_key(self) -> tuple[int, int, int, str]:
        """The consumer's order: priority (high first), timestamp, sequence, filename."""
        return (-self.priority, self.timestamp, self.sequence, self.name)

    def to_message(self, body: bytes) -> Message:
        """The message this file holds, with ``body`` (the file's content) as its body.

        It is persistent (it is a file), and redelivered when a previous
        delivery was attempted (``delivery_count > 0``).
        """
        return Message.decoded(
            body,
            self.id,
            self.priority,
            self.timestamp,
            self.expiration,
            self.correlation_id,
            self.reply_to,
            self.type,
            True,
            self.delivery_count > 0,
            self.delivery_count,
            dict(self.properties),
            self.kind,
            None,
        )

    def with_delivery_count(self, count: int, *, claim_room: int = DEFAULT_CLAIM_ROOM) -> str:
        """This message's name, without a claim prefix, with ``JMSXDeliveryCount`` set to ``count``.

        The name is re-encoded (a foreign name becomes a DropboxMQ one whose id
        field is the old name, so the id survives). A re-encoded foreign name is
        read with DropboxMQ's id rule, so its timestamp comes from the old
        name's leading digits, if any, not receipt.

        Raises:
            InvalidMessage: the new name, claimed with ``claim_room`` bytes of
                prefix, would exceed the filesystem's 255 bytes.
        """
        name = _encode_fields(
            priority=self.priority,
            id_field=_id_field(self.id),
            kind=self.kind,
            expiration=self.expiration,
            correlation_id=self.correlation_id,
            reply_to=self.reply_to,
            type_=self.type,
            properties=self.properties,
            delivery_count=count,
        )
        _check_room(name, claim_room)
        return name


def decode_filename(name: str, *, now_ms: int | None = None) -> DecodedName:
    """Read a DropboxMQ filename as DropboxMQ 1.2 does (with the safe choices above).

    ``now_ms`` is the time of receipt, the timestamp of a name whose id holds
    none (default: the clock). Never raises: a name outside the scheme gives a
    :class:`DecodedName` with ``foreign=True`` and DropboxMQ's defaults.
    """
    receipt = _now() if now_ms is None else now_ms
    notes: list[str] = []
    claimed_by, unclaimed = split_claim_name(name)
    parts = unclaimed.split(".", _FIELDS)
    fields = parts[:_FIELDS] + [""] * (_FIELDS - min(len(parts), _FIELDS))
    props_text = parts[_FIELDS] if len(parts) > _FIELDS else ""
    raw_priority, raw_id, raw_class, raw_expiration, raw_corr, raw_reply, raw_type = fields

    priority = dropbox_number(raw_priority, INT_MAX)
    expiration = dropbox_number(raw_expiration, LONG_MAX) if raw_expiration else 0
    kind = _LETTER_KINDS.get(raw_class) if raw_class else BodyKind.TEXT

    correlation_id = dec_or_literal(raw_corr, "correlation id", notes) or None
    reply_to = _decode_reply_to(raw_reply, notes)
    type_ = dec_or_literal(raw_type, "type", notes) or None
    properties = decode_properties(props_text, notes)
    delivery_count = take_delivery_count(properties, notes)

    if priority is None or not raw_id or kind is None or expiration is None:
        foreign = True
        message_id = JMS_ID_PREFIX + dec_or_literal(unclaimed, "foreign name", notes)
        timestamp, sequence, priority, expiration = receipt, 0, DEFAULT_PRIORITY, 0
    else:
        foreign = False
        message_id = JMS_ID_PREFIX + dec_or_literal(raw_id, "id", notes)
        timestamp, sequence = _id_time(raw_id, receipt)
        if priority > _MAX_PRIORITY:
            notes.append(f"priority {priority} read as {_MAX_PRIORITY}")
            priority = _MAX_PRIORITY
    return DecodedName(
        name=name,
        claimed_by=claimed_by,
        foreign=foreign,
        priority=priority,
        id=message_id,
        timestamp=timestamp,
        sequence=sequence,
        expiration=expiration,
        kind=kind or BodyKind.TEXT,
        correlation_id=correlation_id,
        reply_to=reply_to,
        type=type_,
        delivery_count=delivery_count,
        properties=properties,
        notes=tuple(notes),
    )


def _now() -> int:
    return now_ms()


# -- encoding -----------------------------------------------------------------------------


def check_body(message: Message) -> None:
    """Raise unless DropboxMQ can read ``message``'s body.

    A map, stream or object body must be Java-serialized (DropboxMQ reads it
    with ``ObjectInputStream``): it must start with :data:`JAVA_SERIALIZED`.
    Text and bytes bodies are always readable. Only the stream's header is
    looked at; nothing is deserialized.

    Raises:
        InvalidMessage: a map, stream or object body that is not Java-serialized.
    """
    if message.kind in _SERIALIZED_KINDS and not (
        len(message.body) > len(JAVA_SERIALIZED) and message.body.startswith(JAVA_SERIALIZED)
    ):
        start = message.body[: len(JAVA_SERIALIZED)].hex(" ").upper() or "nothing"
        raise InvalidMessage(
            f"{_ARTICLES[message.kind]} body written to a dropbox must be Java-serialized, as "
            f"DropboxMQ reads it with ObjectInputStream (it starts with AC ED 00 05); this "
            f"one ({len(message.body)} bytes) starts with {start}: send it as bytes "
            "(kind=bytes), or serialize it in Java"
        )


def encode_filename(
    message: Message,
    *,
    sequence: int = 0,
    now_ms: int | None = None,
    claim_room: int = DEFAULT_CLAIM_ROOM,
) -> str:
    """The DropboxMQ filename of ``message`` (its body goes in the file).

    The id field is ``message.id`` without its ``ID:`` prefix, URL-encoded. A
    message without an id gets a new :func:`dropbox_id` from its timestamp (or
    ``now_ms``, or the clock) and ``sequence``. ``delivery_count`` is written as
    ``JMSXDeliveryCountI`` when non-zero. Properties whose names are not Java
    identifiers are left out (see :func:`~chute.dropbox.properties.lost_properties`).

    ``claim_room`` is what the claim prefix of the consumer that will take the
    file adds (:func:`~chute.dropbox.names.claim_room`; by default, room for
    DropboxMQ's generated client ids): the name must fit the filesystem's 255
    bytes once claimed (see Name length).

    Raises:
        InvalidMessage: a field cannot be encoded safely: priority outside 0..9,
            negative expiration or delivery count, an empty reply-to name, a
            property named ``JMSXDeliveryCount`` (use ``delivery_count``), a
            property with no JMS type, a lone surrogate, or a name that would
            not fit once claimed.
    """
    check_priority(message.priority)
    if message.id:
        id_field = _id_field(message.id)
    else:
        stamp = message.timestamp or (_now() if now_ms is None else now_ms)
        id_field = dropbox_id(stamp, sequence)
    if DELIVERY_COUNT in message.properties:
        raise InvalidMessage(
            f"property {DELIVERY_COUNT} is the delivery count: set delivery_count instead"
        )

    name = _encode_fields(
        priority=message.priority,
        id_field=id_field,
        kind=message.kind,
        expiration=message.expiration,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        type_=message.type,
        properties=message.properties,
        delivery_count=message.delivery_count,
    )
    _check_room(name, claim_room)
    return name


def _id_field(message_id: str) -> str:
    """The id field of ``message_id``: without JMS's ``ID:`` prefix (DropboxMQ adds it)."""
    if message_id.startswith(JMS_ID_PREFIX) and len(message_id) > len(JMS_ID_PREFIX):
        message_id = message_id[len(JMS_ID_PREFIX) :]
    return enc(message_id)


def _check_room(name: str, claim_room: int) -> None:
    """Raise unless ``name`` fits once claimed with ``claim_room`` bytes of prefix."""
    if len(name) + claim_room > NAME_MAX_BYTES:  # the encoded name is ASCII
        raise InvalidMessage(
            f"the DropboxMQ filename would be {len(name)} bytes; claimed with a "
            f"{claim_room}-byte client prefix it must fit {NAME_MAX_BYTES} bytes, so "
            f"{NAME_MAX_BYTES - claim_room} at most: shorten the id, correlation id, "
            "reply-to, type or properties (or the consumers' client ids)"
        )


def _encode_fields(
    *,
    priority: int,
    id_field: str,
    kind: BodyKind,
    expiration: int,
    correlation_id: str | None,
    reply_to: str | None,
    type_: str | None,
    properties: Mapping[str, PropertyValue],
    delivery_count: int,
) -> str:
    if expiration < 0 or expiration > LONG_MAX:
        raise InvalidMessage(f"expiration {expiration} is not a time in ms (0 = never)")
    if delivery_count < 0 or delivery_count > INT_MAX:
        raise InvalidMessage(f"delivery count {delivery_count} is out of range")
    for name in properties:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_PROPERTY_NAME_LENGTH:
            raise InvalidMessage(f"property name {name!r} must be 1-256 characters")
    pairs = [
        encode_property(name, value)
        for name, value in properties.items()
        if is_java_identifier(name)
    ]
    if delivery_count:
        pairs.append(f"{DELIVERY_COUNT}I={int(delivery_count)}")
    fields = [
        str(int(priority)),
        id_field,
        kind.letter,
        str(int(expiration)) if expiration else "",
        enc(correlation_id) if correlation_id else "",
        _encode_reply_to(reply_to) if reply_to else "",
        enc(type_) if type_ else "",
        "&".join(pairs),
    ]
    while len(fields) > 3 and not fields[-1]:
        fields.pop()
    return ".".join(fields)
