"""The bytes of the native protocol: the header and one body codec per packet type.

Layout (all integers big-endian)::

    header   length u32 | version u8 | type u8 | correlation u32 | target u32 | callback u32
             (length counts every byte after itself: 14 header bytes + the body)
    string   s16: length u16 + UTF-8      s32: length u32 + UTF-8
    optional o16/o32: present u8 (0/1), then the string if present
    bool     u8, 0 or 1

    content  the message content block (see chute.content)

    Send     ttl_ms u64 | address s16 | content (rest of the packet)      target = session
    Deliver  seq u64 | delivery_count u32 | redelivered u8 | timestamp i64 | expiration i64
             | content (rest of the packet)                              target = consumer
    BrowseResult  count u32, then per message: seq u64 | delivery_count u32 | redelivered u8
             | timestamp i64 | expiration i64 | content_len u32 | content
    CursorBatch   next u64, then the entries of a BrowseResult (count u32, ...)
    strings  (XaCommitBatch's xids) count u32, then count x s16

Every other packet is a fixed list of fields (``_SPECS``). The content block of
a Send is exactly the content block of the Deliver that forwards it, so the
broker splices the bytes it received (``Send.content``) into
:func:`encode_deliver` without encoding the message again.

Decoders raise only :class:`~chute.errors.RemoteProtocolError`; encoders raise
:class:`~chute.errors.LocalProtocolError` for values the wire cannot carry.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from chute.content import (
    CONTENT_HEAD,
    DEFAULT_MAX_PROPERTIES,
    ENCODE_ERRORS,
    KIND_CODES,
    KINDS,
    as_bool,
    decode_content,
    encode_content,
    malformed,
)
from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.message import BodyKind, Message
from chute.protocol.packets import (
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Ack,
    AckMode,
    Browse,
    BrowseResult,
    CallbackCreate,
    Commit,
    Connect,
    Connected,
    ConsumerClose,
    ConsumerOpen,
    Credit,
    CursorAck,
    CursorBatch,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    Deliver,
    Disconnect,
    Error,
    Header,
    Nack,
    Ok,
    Packet,
    PacketType,
    Ping,
    Pong,
    Rollback,
    Send,
    SessionClose,
    SessionOpen,
    Stat,
    StatResult,
    TempQueue,
    TempQueueCreated,
    Unsubscribe,
    XaCommit,
    XaCommitBatch,
    XaPrepare,
    XaRecover,
    XaRollback,
)

HEADER: Final = struct.Struct(">IBBIII")
HEADER_SIZE: Final = HEADER.size  # 18
HEADER_REST: Final = HEADER_SIZE - 4  # header bytes counted by ``length``

_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_I64: Final = struct.Struct(">q")


# Send and Deliver: header and fixed fields packed in one call.
_SEND: Final = struct.Struct(">IBBIIIQH")
_SEND_FIXED: Final = struct.Struct(">QH")
_DELIVER: Final = struct.Struct(">IBBIIIQIBqq")
_DELIVER_FIXED: Final = struct.Struct(">QIBqq")
_DELIVER_FIXED_SIZE: Final = _DELIVER_FIXED.size
_DELIVER_SIZE: Final = _DELIVER.size  # header + fixed fields: where the content starts
# ... and the content block's head, for the plain message decoded in line.
_DELIVER_HEADS: Final = struct.Struct(_DELIVER.format + CONTENT_HEAD.format[1:])
_DELIVER_HEADS_SIZE: Final = _DELIVER_HEADS.size
_decoded: Final = Message.decoded
_TYPE_OFFSET: Final = 5  # length u32 | version u8 | type u8
_BROWSE_ENTRY: Final = struct.Struct(">QIBqqI")
_SEND_TAG: Final = int(PacketType.SEND)
_DELIVER_TAG: Final = int(PacketType.DELIVER)

_DECODE_ERRORS: Final = (
    struct.error,
    UnicodeDecodeError,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    OverflowError,
)


# -- hot path: Send and Deliver ---------------------------------------------------------


def encode_send(  # noqa: PLR0917 - hot path, called positionally
    session_id: int,
    address: bytes,
    content: bytes,
    ttl_ms: int = 0,
    correlation_id: int = 0,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole Send packet from pre-encoded parts (``address`` as UTF-8 bytes)."""
    head = _SEND.pack(
        len(address) + len(content) + 24,
        version,
        _SEND_TAG,
        correlation_id,
        session_id,
        0,
        ttl_ms,
        len(address),
    )
    return b"".join((head, address, content))


PLAIN_ID_PARTS: Final = (20, 12)
"""A plain Send's message id comes in two parts of these sizes (32 bytes in all)."""
SEND_TAG: Final = _SEND_TAG
BYTES_KIND: Final = KIND_CODES[BodyKind.BYTES]


@functools.lru_cache(maxsize=256)
def plain_send_struct(address: bytes) -> struct.Struct:
    """The layout of a whole *plain* Send but its body, so one ``pack`` encodes it.

    Plain: a 32-byte message id, no correlation id, reply-to, type nor
    properties (the common producer's message). Fields, in ``pack`` order:
    length (``size - 4 + len(body)``), version, type (:data:`SEND_TAG`),
    correlation, session, callback (0), ttl_ms, address length, address
    (these bytes), priority, flags (1 = persistent), kind (:data:`BYTES_KIND`
    ...), id length (32), correlation/reply-to/type lengths and property count
    (0), then the id in two parts (:data:`PLAIN_ID_PARTS`); the body follows.
    """
    head, tail = PLAIN_ID_PARTS
    return struct.Struct(f">IBBIIIQH{len(address)}sBBBHHHHH{head}s{tail}s")


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
            len(content) + 43,
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
        except _DECODE_ERRORS as exc:
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
    if end - start < 10:
        raise malformed("Send body too short")
    ttl_ms, address_len = _SEND_FIXED.unpack_from(data, start)
    p = start + 10
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


def _encode_deliver_packet(packet: Deliver) -> tuple[int, int, bytes]:
    content = packet.content if packet.content is not None else encode_content(packet.message)
    fixed = _DELIVER_FIXED.pack(
        packet.seq, packet.delivery_count, packet.redelivered, packet.timestamp, packet.expiration
    )
    return packet.consumer_id, 0, fixed + content


def _encode_browse_result(packet: BrowseResult) -> tuple[int, int, bytes]:
    return 0, 0, _encode_entries(packet.messages)


def _encode_entries(messages: tuple[tuple[int, Message], ...]) -> bytes:
    parts = [_U32.pack(len(messages))]
    for seq, m in messages:
        content = m.encoded if m.encoded is not None else encode_content(m)  # the splice
        parts.append(
            _BROWSE_ENTRY.pack(
                seq, m.delivery_count, m.redelivered, m.timestamp, m.expiration, len(content)
            )
        )
        parts.append(content)
    return b"".join(parts)


def _decode_browse_result(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> BrowseResult:
    return BrowseResult(_decode_entries(data[start:end], 0, max_properties, "BrowseResult"))


def _encode_cursor_batch(packet: CursorBatch) -> tuple[int, int, bytes]:
    return 0, 0, _U64.pack(packet.next) + _encode_entries(packet.messages)


def _decode_cursor_batch(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> CursorBatch:
    data = data[start:end]
    (next_start,) = _U64.unpack_from(data, 0)
    return CursorBatch(next_start, _decode_entries(data, 8, max_properties, "CursorBatch"))


def _decode_entries(
    data: bytes, pos: int, max_properties: int, name: str
) -> tuple[tuple[int, Message], ...]:
    (count,) = _U32.unpack_from(data, pos)
    pos += 4
    entries: list[tuple[int, Message]] = []
    for _ in range(count):
        seq, dc, redelivered, ts, exp, length = _BROWSE_ENTRY.unpack_from(data, pos)
        pos += _BROWSE_ENTRY.size
        end = pos + length
        if end > len(data):
            raise malformed(f"{name} entry overruns the packet")
        m = decode_content(data, pos, end, max_properties, ts, exp, dc, as_bool(redelivered))
        entries.append((seq, m))
        pos = end
    if pos != len(data):
        raise malformed(f"trailing bytes after {name}")
    return tuple(entries)


# -- every other packet: a list of typed fields ------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, st: struct.Struct) -> Any:
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def raw(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise malformed("string overruns the packet")
        value = self.data[self.pos : end]
        self.pos = end
        return value

    def flag(self) -> bool:
        return as_bool(self.fixed(_U8))


def _read_s16(r: _Reader) -> str:
    return r.raw(r.fixed(_U16)).decode()


def _read_s32(r: _Reader) -> str:
    return r.raw(r.fixed(_U32)).decode()


def _read_o16(r: _Reader) -> str | None:
    return _read_s16(r) if r.flag() else None


def _read_o32(r: _Reader) -> str | None:
    return _read_s32(r) if r.flag() else None


_ACK_MODES: Final = tuple(AckMode)
_ACK_INDEX: Final = {m: i for i, m in enumerate(_ACK_MODES)}


def _s16(value: str) -> bytes:
    data = value.encode()
    return _U16.pack(len(data)) + data


def _s32(value: str) -> bytes:
    data = value.encode()
    return _U32.pack(len(data)) + data


def _o16(value: str | None) -> bytes:
    return b"\x00" if value is None else b"\x01" + _s16(value)


def _o32(value: str | None) -> bytes:
    return b"\x00" if value is None else b"\x01" + _s32(value)


def _strings(values: tuple[str, ...]) -> bytes:
    if isinstance(values, str):  # a lone string is not a list of them
        raise TypeError("expected a sequence of strings")
    return _U32.pack(len(values)) + b"".join(_s16(v) for v in values)


def _read_strings(r: _Reader) -> tuple[str, ...]:
    count = r.fixed(_U32)
    if count > len(r.data) - r.pos:  # each takes at least 2 bytes: refuse absurd counts early
        raise malformed("string list overruns the packet")
    return tuple(_read_s16(r) for _ in range(count))


class _Field(NamedTuple):
    encode: Callable[[Any], bytes]
    decode: Callable[[_Reader], Any]


_FIELDS: Final[dict[str, _Field]] = {
    "u8": _Field(_U8.pack, lambda r: r.fixed(_U8)),
    "u16": _Field(_U16.pack, lambda r: r.fixed(_U16)),
    "u32": _Field(_U32.pack, lambda r: r.fixed(_U32)),
    "u64": _Field(_U64.pack, lambda r: r.fixed(_U64)),
    "i64": _Field(_I64.pack, lambda r: r.fixed(_I64)),
    "bool": _Field(lambda v: b"\x01" if v else b"\x00", _Reader.flag),
    "s16": _Field(_s16, _read_s16),
    "s32": _Field(_s32, _read_s32),
    "o16": _Field(_o16, _read_o16),
    "o32": _Field(_o32, _read_o32),
    "strs": _Field(_strings, _read_strings),
    "ack": _Field(lambda m: _U8.pack(_ACK_INDEX[AckMode(m)]), lambda r: _ACK_MODES[r.fixed(_U8)]),
}
TARGET: Final = "target"
CALLBACK: Final = "callback"

# Field order = dataclass field order; "target"/"callback" fields live in the header.
_SPECS: Final[dict[type, tuple[PacketType, tuple[str, ...]]]] = {
    Connect: (PacketType.CONNECT, ("u8", "u8", "o16", "o16", "o16", "u32")),
    Connected: (PacketType.CONNECTED, ("u8", "s16", "u32", "u32")),
    Ping: (PacketType.PING, ()),
    Pong: (PacketType.PONG, ()),
    Disconnect: (PacketType.DISCONNECT, ()),
    Error: (PacketType.ERROR, ("s16", "s32")),
    Ok: (PacketType.OK, ("o32",)),
    SessionOpen: (PacketType.SESSION_OPEN, (CALLBACK, "ack", "bool")),
    SessionClose: (PacketType.SESSION_CLOSE, (TARGET,)),
    ConsumerOpen: (
        PacketType.CONSUMER_OPEN,
        (TARGET, CALLBACK, "s16", "o32", "u32", "bool", "o16", "bool", "bool"),
    ),
    ConsumerClose: (PacketType.CONSUMER_CLOSE, (TARGET,)),
    Ack: (PacketType.ACK, (TARGET, "u64", "bool", "u32")),
    Nack: (PacketType.NACK, (TARGET, "u64", "bool")),
    Credit: (PacketType.CREDIT, (TARGET, "u32")),
    Commit: (PacketType.COMMIT, (TARGET,)),
    Rollback: (PacketType.ROLLBACK, (TARGET,)),
    XaPrepare: (PacketType.XA_PREPARE, (TARGET, "s16")),
    XaCommit: (PacketType.XA_COMMIT, ("s16",)),
    XaRollback: (PacketType.XA_ROLLBACK, ("s16",)),
    XaRecover: (PacketType.XA_RECOVER, ()),
    XaCommitBatch: (PacketType.XA_COMMIT_BATCH, ("s16", "i64", "strs", "bool")),
    Browse: (PacketType.BROWSE, ("s16", "o32", "u32")),
    Stat: (PacketType.STAT, ()),
    StatResult: (PacketType.STAT_RESULT, ("s32",)),
    Unsubscribe: (PacketType.UNSUBSCRIBE, ("s16", "o16")),
    TempQueue: (PacketType.TEMP_QUEUE, ()),
    TempQueueCreated: (PacketType.TEMP_QUEUE_CREATED, ("s16",)),
    CallbackCreate: (PacketType.CALLBACK_CREATE, ("s16", "s16", "s16", "o32")),
    CursorOpen: (PacketType.CURSOR_OPEN, ("s16", "o16", "o32", "u32")),
    CursorInfo: (PacketType.CURSOR_INFO, ("u64", "u64")),
    CursorFetch: (PacketType.CURSOR_FETCH, ("s16", "o16", "u64", "u64", "u32", "u32")),
    CursorAck: (PacketType.CURSOR_ACK, ("s16", "s16", "u64")),
    CursorClose: (PacketType.CURSOR_CLOSE, ("s16", "s16", "bool")),
}

Encoder = Callable[[Any], tuple[int, int, bytes]]
"""packet → (target id, callback id, body bytes)"""
Decoder = Callable[[bytes, int, int, Header, int], Any]
"""(data, body start, body end, header, max properties) → packet"""


def _spec_codec(cls: type, kinds: tuple[str, ...]) -> tuple[Encoder, Decoder]:
    names = [f.name for f in dataclasses.fields(cls)]
    plan = list(zip(names, kinds, strict=True))

    def encode(packet: Any) -> tuple[int, int, bytes]:
        target = callback = 0
        parts: list[bytes] = []
        for name, kind in plan:
            value = getattr(packet, name)
            if kind == TARGET:
                target = value
            elif kind == CALLBACK:
                callback = value
            else:
                parts.append(_FIELDS[kind].encode(value))
        return target, callback, b"".join(parts)

    def decode(data: bytes, start: int, end: int, header: Header, max_properties: int) -> Any:
        data = data[start:end]
        r = _Reader(data)
        values: list[Any] = []
        for _name, kind in plan:
            if kind == TARGET:
                values.append(header.target_id)
            elif kind == CALLBACK:
                values.append(header.callback_id)
            else:
                values.append(_FIELDS[kind].decode(r))
        if r.pos != len(data):
            raise malformed(f"{len(data) - r.pos} trailing bytes in {cls.__name__} body")
        return cls(*values)

    return encode, decode


class Codec(NamedTuple):
    """One packet type's wire tag and body codec pair."""

    tag: PacketType
    cls: type
    encode: Encoder
    decode: Decoder


def _build_table() -> dict[int, Codec]:
    table: dict[int, Codec] = {}
    for cls, (ptype, kinds) in _SPECS.items():
        table[ptype] = Codec(ptype, cls, *_spec_codec(cls, kinds))
    table[PacketType.SEND] = Codec(PacketType.SEND, Send, _encode_send_packet, _decode_send)
    table[PacketType.DELIVER] = Codec(
        PacketType.DELIVER, Deliver, _encode_deliver_packet, _decode_deliver
    )
    table[PacketType.BROWSE_RESULT] = Codec(
        PacketType.BROWSE_RESULT, BrowseResult, _encode_browse_result, _decode_browse_result
    )
    table[PacketType.CURSOR_BATCH] = Codec(
        PacketType.CURSOR_BATCH, CursorBatch, _encode_cursor_batch, _decode_cursor_batch
    )
    return table


CODECS: Final = _build_table()
"""Body codecs by packet type tag."""
_BY_CLASS: Final = {c.cls: c for c in CODECS.values()}

# These bodies never change, so peers can always negotiate the version.
VERSIONLESS: Final = frozenset({PacketType.CONNECT, PacketType.CONNECTED, PacketType.ERROR})


def encode_packet(
    packet: Packet,
    correlation_id: int = 0,
    target_id: int | None = None,
    callback_id: int | None = None,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole packet (header + body). The header's target and callback come from the
    packet's id fields unless given.

    Raises:
        LocalProtocolError: the packet cannot be encoded (a value out of range, a
            string too long, a value of the wrong type).
    """
    try:
        codec = _BY_CLASS[type(packet)]
        target, callback, body = codec.encode(packet)
        return (
            HEADER.pack(
                len(body) + HEADER_REST,
                version,
                codec.tag,
                correlation_id,
                target if target_id is None else target_id,
                callback if callback_id is None else callback_id,
            )
            + body
        )
    except LocalProtocolError:
        raise
    except (*ENCODE_ERRORS, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise LocalProtocolError(f"cannot encode {packet!r}: {exc}") from exc


def encode_ok(correlation_id: int, version: int = PROTOCOL_VERSION) -> bytes:
    """``encode_packet(Ok(), correlation_id, version=version)``, for the hot confirmations."""
    return HEADER.pack(_OK_LENGTH, version, PacketType.OK, correlation_id, 0, 0) + _OK_BODY


_OK_BODY: Final = _BY_CLASS[Ok].encode(Ok())[2]
_OK_LENGTH: Final = len(_OK_BODY) + HEADER_REST


def decode_body(  # noqa: PLR0917 - hot path, called positionally
    packet_type: int,
    header: Header,
    data: bytes,
    start: int = 0,
    end: int | None = None,
    max_properties: int = DEFAULT_MAX_PROPERTIES,
) -> Packet:
    """Decode the body ``data[start:end]`` of a packet of type ``packet_type``.

    Raises:
        RemoteProtocolError: unknown type ('unknown-packet-type') or a malformed body
            ('malformed-packet', 'too-many-properties').
    """
    codec = CODECS.get(packet_type)
    if codec is None:
        raise RemoteProtocolError(f"unknown packet type {packet_type}", "unknown-packet-type")
    try:
        packet: Packet = codec.decode(
            data, start, len(data) if end is None else end, header, max_properties
        )
    except _DECODE_ERRORS as exc:
        raise malformed(f"malformed {codec.tag.name} packet: {exc}") from exc
    return packet


__all__ = [
    "CODECS",
    "DEFAULT_MAX_PROPERTIES",
    "HEADER",
    "HEADER_REST",
    "HEADER_SIZE",
    "VERSIONLESS",
    "Codec",
    "decode_body",
    "decode_deliveries",
    "encode_deliver",
    "encode_packet",
    "encode_send",
]
