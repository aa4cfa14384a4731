"""The native protocol's hot paths: Send and Deliver, whose content block is spliced.

Layout (after the header of :mod:`chute.protocol.spec`; big-endian)::

    Send     ttl_ms u64 | address s16 | content (rest of the packet)      target = session
    SendMany ttl_ms u64 | address s16 | count u32
             | (content_len u32 | content) x count                       target = session
    Deliver  seq u64 | delivery_count u32 | redelivered u8 | timestamp i64 | expiration i64
             | content (rest of the packet)                              target = consumer

The content block (:mod:`chute.content`) of a Send is exactly the content
block of the Deliver that forwards it, so the broker splices the bytes it
received (``Send.content``) into :func:`encode_deliver` without encoding the
message again. Everything here packs a header and the fixed fields in one
``struct`` call, and the structs are built from the one header layout
(``spec.HEADER``):

* :func:`encode_send` and :func:`plain_send_encoder`: a producer's Send (the
  second is the client's path for the common message: one ``pack``, no
  Message, no content block built apart); :func:`encode_send_many`: a bulk
  producer's SendMany, from content blocks (a SendMany's are spliced as a Send's), and
  :func:`encode_send_many_framed` from blocks already framed and joined;
* :func:`encode_deliver` and :func:`encode_ok`: the broker's deliveries and
  confirmations;
* :func:`decode_deliveries`: the client's run of Deliver packets, decoded in
  place without a Header or Deliver object;
* :data:`SPLICE_CODECS`: the Send and Deliver entries of the packet table
  (:mod:`chute.protocol.wire`), which keep the content bytes they decode.

Pure functions: safe on any thread.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from chute.content import (
    CONTENT_HEAD,
    KIND_CODES,
    KINDS,
    decode_content,
    encode_content,
    malformed,
)
from chute.message import GENERATED_ID_SIZE, BodyKind, Message
from chute.protocol.packets import (
    PROTOCOL_VERSION,
    SEND_MANY_MAX,
    SUPPORTED_VERSIONS,
    Deliver,
    Header,
    Ok,
    PacketType,
    Send,
    SendMany,
)
from chute.protocol.spec import DECODE_ERRORS, HEADER, HEADER_REST, SPEC_CODECS, Codec

# Header and fixed fields, packed in one call.
_SEND: Final = struct.Struct(HEADER.format + "QH")
_SEND_FIXED: Final = struct.Struct(">QH")
_SEND_FIXED_SIZE: Final = _SEND_FIXED.size
_U32: Final = struct.Struct(">I")
_DELIVER_FIXED: Final = struct.Struct(">QIBqq")
_DELIVER: Final = struct.Struct(HEADER.format + _DELIVER_FIXED.format[1:])
_DELIVER_FIXED_SIZE: Final = _DELIVER_FIXED.size
_DELIVER_SIZE: Final = _DELIVER.size  # header + fixed fields: where the content starts
_DELIVER_LENGTH: Final = _DELIVER_SIZE - 4  # what ``length`` counts besides the content
# ... and the content block's head, for the plain message decoded in line.
_DELIVER_HEADS: Final = struct.Struct(_DELIVER.format + CONTENT_HEAD.format[1:])
_DELIVER_HEADS_SIZE: Final = _DELIVER_HEADS.size
_decoded: Final = Message.decoded
_TYPE_OFFSET: Final = 5  # length u32 | version u8 | type u8
_SEND_TAG: Final = int(PacketType.SEND)
_SEND_MANY_TAG: Final = int(PacketType.SEND_MANY)
_DELIVER_TAG: Final = int(PacketType.DELIVER)
_BYTES_KIND: Final = KIND_CODES[BodyKind.BYTES]


# -- Send ---------------------------------------------------------------------------------


def encode_send(  # noqa: PLR0917 - hot path, called positionally
    session_id: int,
    address: bytes,
    content: bytes,
    ttl_ms: int = 0,
    correlation_id: int = 0,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole Send packet from pre-encoded parts (``address`` as UTF-8 bytes).

    Raises:
        struct.error: a number out of its field's range.
    """
    head = _SEND.pack(
        len(address) + len(content) + _SEND.size - 4,
        version,
        _SEND_TAG,
        correlation_id,
        session_id,
        0,
        ttl_ms,
        len(address),
    )
    return b"".join((head, address, content))


def encode_send_many(  # noqa: PLR0917 - called positionally, like encode_send
    session_id: int,
    address: bytes,
    contents: Sequence[bytes],
    ttl_ms: int = 0,
    correlation_id: int = 0,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole SendMany packet from content blocks (``address`` as UTF-8 bytes).

    Raises:
        struct.error: a number out of its field's range.
    """
    parts: list[bytes] = [b"", address, _U32.pack(len(contents))]
    size = 0
    pack = _U32.pack
    for content in contents:
        parts += (pack(len(content)), content)
        size += len(content)
    parts[0] = _SEND.pack(
        _SEND.size - 4 + len(address) + 4 + 4 * len(contents) + size,
        version,
        _SEND_MANY_TAG,
        correlation_id,
        session_id,
        0,
        ttl_ms,
        len(address),
    )
    return b"".join(parts)


def encode_send_many_framed(  # noqa: PLR0917 - called positionally, like encode_send_many
    session_id: int,
    address: bytes,
    count: int,
    framed: bytes | memoryview,
    ttl_ms: int = 0,
    correlation_id: int = 0,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole SendMany packet whose ``count`` messages are ``framed``: each content
    block behind its length (``content_len u32 | content``, as the packet carries
    them), already joined (a columnar producer builds them so, without a block apart
    per message).

    Raises:
        struct.error: a number out of its field's range.
    """
    head = _SEND.pack(
        _SEND.size - 4 + len(address) + 4 + len(framed),
        version,
        _SEND_MANY_TAG,
        correlation_id,
        session_id,
        0,
        ttl_ms,
        len(address),
    )
    return b"".join((head, address, _U32.pack(count), framed))


PlainSend = Callable[[bytes, int, int, int, int, int, bool, bytes], bytes]
"""``(body, version, correlation, session, ttl_ms, priority, persistent, message id)
→ packet``: see :func:`plain_send_encoder`."""


@functools.lru_cache(maxsize=256)
def plain_send_encoder(address: bytes) -> PlainSend:
    """The encoder of *plain* Sends to ``address`` (UTF-8, canonical): one ``pack`` each.

    Plain: bytes body (kind ``bytes``), a generated id of
    :data:`~chute.message.GENERATED_ID_SIZE` ASCII bytes (as
    :meth:`~chute.message.MessageIds.next_bytes` makes), no correlation id,
    reply-to, type nor properties: the common producer's message. The packet
    is byte for byte what :func:`encode_send` makes of the same message's
    content block.

    The encoder raises ``struct.error`` for a number out of its field's range.
    """
    layout = struct.Struct(
        f"{_SEND.format}{len(address)}sBBBHHHHH{GENERATED_ID_SIZE}s"
    )  # ... | address | the content block's head | the id; the body follows
    pack = layout.pack
    fixed = layout.size - 4
    address_size = len(address)
    tag, kind, id_size = _SEND_TAG, _BYTES_KIND, GENERATED_ID_SIZE

    def encode(  # noqa: PLR0917 - hot path, called positionally
        body: bytes,
        version: int,
        correlation_id: int,
        session_id: int,
        ttl_ms: int,
        priority: int,
        persistent: bool,
        message_id: bytes,
    ) -> bytes:
        return (
            pack(
                fixed + len(body),
                version,
                tag,
                correlation_id,
                session_id,
                0,
                ttl_ms,
                address_size,
                address,
                priority,
                persistent,  # flags: 1 = persistent
                kind,
                id_size,
                0,
                0,
                0,
                0,
                message_id,
            )
            + body
        )

    return encode


# -- Deliver ------------------------------------------------------------------------------


def encode_deliver(  # noqa: PLR0917 - hot path, called positionally
    consumer_id: int,
    seq: int,
    delivery_count: int,
    redelivered: bool,
    timestamp: int,
    expiration: int,
    content: bytes,
    correlation_id: int = 0,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole Deliver packet around an already encoded content block.

    This is the broker's splice: pass ``Send.content`` (or
    :func:`encode_content` of a stored message) and the broker fields.
    """
    return (
        _DELIVER.pack(
            len(content) + _DELIVER_LENGTH,
            version,
            _DELIVER_TAG,
            correlation_id,
            consumer_id,
            0,
            seq,
            delivery_count,
            redelivered,
            timestamp,
            expiration,
        )
        + content
    )


def decode_deliveries(
    data: bytes,
    pos: int,
    max_packet_size: int,
    max_properties: int,
    sink: Callable[[int, int, Message], None],
) -> int:
    """Decode the run of whole Deliver packets from ``data[pos]``: each goes to
    ``sink(consumer_id, seq, message)``. Returns the position after the last one.

    The client's hot path: one unpack for header and fixed fields, no Header
    or Deliver object. It stops at anything else (another packet type, a packet
    not all here, a header that breaks a limit, a bad flag) and leaves it to
    :meth:`~chute.protocol.codec.PacketCodec.next_packet`, which raises if it must.

    Raises:
        RemoteProtocolError: a malformed content block.
    """
    size = len(data)
    unpack = _DELIVER_HEADS.unpack_from
    versions = SUPPORTED_VERSIONS
    kinds = KINDS
    while size - pos >= _DELIVER_HEADS_SIZE and data[pos + _TYPE_OFFSET] == _DELIVER_TAG:
        (
            length,
            version,
            _,
            _,
            target,
            _,
            seq,
            count,
            redelivered,
            ts,
            exp,
            priority,
            flags,
            kind,
            id_len,
            corr_len,
            reply_len,
            type_len,
            n_props,
        ) = unpack(data, pos)
        end = pos + 4 + length
        if (
            end > size
            or length + 4 > max_packet_size
            or length < _DELIVER_HEADS_SIZE - 4
            or version not in versions
            or redelivered > 1
        ):
            break
        p = pos + _DELIVER_HEADS_SIZE
        q = p + id_len
        try:
            if (
                flags <= 1
                and q <= end
                and priority <= 9
                and not (corr_len or reply_len or type_len or n_props)
            ):  # plain: decoded here, as decode_content would
                message = _decoded(
                    data[q:end],
                    data[p:q].decode(),
                    priority,
                    ts,
                    exp,
                    None,
                    None,
                    None,
                    flags == 1,
                    redelivered == 1,
                    count,
                    {},
                    kinds[kind],
                    None,
                )
            else:
                message = decode_content(
                    data, pos + _DELIVER_SIZE, end, max_properties, ts, exp, count, redelivered == 1
                )
        except DECODE_ERRORS as exc:
            raise malformed(f"malformed DELIVER packet: {exc}") from exc
        sink(target, seq, message)
        pos = end
    return pos


def _setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    # Slot descriptors set fields without the frozen dataclass's __setattr__ detour:
    # building a Send or Deliver this way costs half as much as calling the class.
    return tuple(cls.__dict__[name].__set__ for name in names)


_new = object.__new__
_S_SESSION, _S_ADDRESS, _S_MESSAGE, _S_TTL, _S_CONTENT = _setters(
    Send, "session_id", "address", "message", "ttl_ms", "content"
)
_D_CONSUMER, _D_SEQ, _D_COUNT, _D_REDELIVERED, _D_TS, _D_EXP, _D_MESSAGE, _D_CONTENT = _setters(
    Deliver,
    "consumer_id",
    "seq",
    "delivery_count",
    "redelivered",
    "timestamp",
    "expiration",
    "message",
    "content",
)


def _decode_send(data: bytes, start: int, end: int, header: Header, max_properties: int) -> Send:
    if end - start < _SEND_FIXED_SIZE:
        raise malformed("Send body too short")
    ttl_ms, address_len = _SEND_FIXED.unpack_from(data, start)
    p = start + _SEND_FIXED_SIZE
    q = p + address_len
    if q > end:
        raise malformed("Send address overruns the packet")
    content = data[q:end]
    message = decode_content(content, 0, end - q, max_properties)
    message.encoded = content  # the splice: a Deliver can reuse these bytes
    packet = _new(Send)
    _S_SESSION(packet, header.target_id)
    _S_ADDRESS(packet, data[p:q].decode())
    _S_MESSAGE(packet, message)
    _S_TTL(packet, ttl_ms)
    _S_CONTENT(packet, content)
    return packet


def _decode_send_many(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> SendMany:
    if end - start < _SEND_FIXED_SIZE:
        raise malformed("SendMany body too short")
    ttl_ms, address_len = _SEND_FIXED.unpack_from(data, start)
    p = start + _SEND_FIXED_SIZE
    q = p + address_len
    if q + 4 > end:
        raise malformed("SendMany address overruns the packet")
    (count,) = _U32.unpack_from(data, q)
    q += 4
    if count > SEND_MANY_MAX:
        raise malformed(f"SendMany of {count} messages: at most {SEND_MANY_MAX}")
    if count * 4 > end - q:
        raise malformed(f"SendMany count {count} overruns the packet")
    messages: list[Message] = []
    for _ in range(count):
        (length,) = _U32.unpack_from(data, q)
        q += 4
        if length > end - q:
            raise malformed("a SendMany content block overruns the packet")
        content = data[q : q + length]
        message = decode_content(content, 0, length, max_properties)
        message.encoded = content  # the splice, as a Send's
        messages.append(message)
        q += length
    if q != end:
        raise malformed(f"{end - q} bytes after the last of a SendMany's messages")
    return SendMany(header.target_id, data[p : p + address_len].decode(), tuple(messages), ttl_ms)


def _decode_deliver(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> Deliver:
    if end - start < _DELIVER_FIXED_SIZE:
        raise malformed("Deliver body too short")
    seq, count, redelivered, timestamp, expiration = _DELIVER_FIXED.unpack_from(data, start)
    if redelivered > 1:
        raise malformed("Deliver redelivered flag must be 0 or 1")
    redelivered = redelivered == 1
    start += _DELIVER_FIXED_SIZE
    packet = _new(Deliver)
    _D_CONSUMER(packet, header.target_id)
    _D_SEQ(packet, seq)
    _D_COUNT(packet, count)
    _D_REDELIVERED(packet, redelivered)
    _D_TS(packet, timestamp)
    _D_EXP(packet, expiration)
    _D_MESSAGE(
        packet,
        decode_content(data, start, end, max_properties, timestamp, expiration, count, redelivered),
    )
    _D_CONTENT(packet, None)
    return packet


def _encode_send_packet(packet: Send) -> tuple[int, int, bytes]:
    content = packet.content if packet.content is not None else encode_content(packet.message)
    address = packet.address.encode()
    return (
        packet.session_id,
        0,
        b"".join((_SEND_FIXED.pack(packet.ttl_ms, len(address)), address, content)),
    )


def _encode_send_many_packet(packet: SendMany) -> tuple[int, int, bytes]:
    address = packet.address.encode()
    contents = [m.encoded if m.encoded is not None else encode_content(m) for m in packet.messages]
    parts = [_SEND_FIXED.pack(packet.ttl_ms, len(address)), address, _U32.pack(len(contents))]
    for content in contents:
        parts += (_U32.pack(len(content)), content)
    return packet.session_id, 0, b"".join(parts)


def _encode_deliver_packet(packet: Deliver) -> tuple[int, int, bytes]:
    content = packet.content if packet.content is not None else encode_content(packet.message)
    fixed = _DELIVER_FIXED.pack(
        packet.seq, packet.delivery_count, packet.redelivered, packet.timestamp, packet.expiration
    )
    return packet.consumer_id, 0, fixed + content


# -- Ok -----------------------------------------------------------------------------------


_OK_BODY: Final = SPEC_CODECS[PacketType.OK].encode(Ok())[2]
_OK_LENGTH: Final = len(_OK_BODY) + HEADER_REST


def encode_ok(correlation_id: int, version: int = PROTOCOL_VERSION) -> bytes:
    """``encode_packet(Ok(), correlation_id, version=version)``, for the hot confirmations."""
    return HEADER.pack(_OK_LENGTH, version, PacketType.OK, correlation_id, 0, 0) + _OK_BODY


SPLICE_CODECS: Final[dict[int, Codec]] = {
    PacketType.SEND: Codec(PacketType.SEND, Send, _encode_send_packet, _decode_send),
    PacketType.SEND_MANY: Codec(
        PacketType.SEND_MANY, SendMany, _encode_send_many_packet, _decode_send_many
    ),
    PacketType.DELIVER: Codec(PacketType.DELIVER, Deliver, _encode_deliver_packet, _decode_deliver),
}
"""The Send, SendMany and Deliver entries of the packet table."""

__all__ = [
    "SPLICE_CODECS",
    "PlainSend",
    "decode_deliveries",
    "encode_deliver",
    "encode_ok",
    "encode_send",
    "encode_send_many",
    "plain_send_encoder",
]
