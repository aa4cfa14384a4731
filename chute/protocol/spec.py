"""The bytes of the native protocol's packets, declared once: the header, the field kinds,
and one spec per packet type, from which a generic encode/decode pair is built.

Layout (all integers big-endian)::

    header   length u32 | version u8 | type u8 | correlation u32 | target u32 | callback u32
             (length counts every byte after itself: 14 header bytes + the body)
    string   s16: length u16 + UTF-8      s32: length u32 + UTF-8
    optional o16/o32: present u8 (0/1), then the string if present
    t16      an o16 that ends the body and may be left out (absent: None)
    bool     u8, 0 or 1
    strings  (XaCommitBatch's xids) count u32, then count x s16
    seqs     (Move's, DeadLetterRetry's) count u32, then count x u64
    counts   (DeadLetterRetryResult's) count u32, then count x (s16 address | u64 count)

    content  the message content block (see chute.content)
    BrowseResult  count u32, then per message: seq u64 | delivery_count u32 | redelivered u8
             | timestamp i64 | expiration i64 | content_len u32 | content
    CursorPage   next u64, then the entries of a BrowseResult (count u32, ...)
    BrowsePage   after u64 | before u64 | done u8, then the entries of a BrowseResult

Every packet but five is a fixed list of those fields: its spec in ``_SPECS``
(field order = the dataclass's; a handler-id field is the header's target or
callback, never repeated in the body). BrowseResult, BrowsePage and CursorPage
carry messages, so their codecs are written out here. Send and Deliver are the hot
paths and splice content blocks: :mod:`chute.protocol.splice` has their
codecs, and :mod:`chute.protocol.wire` joins both tables.

Decoders raise only what ``DECODE_ERRORS`` lists (the caller turns it into
:class:`~chute.errors.RemoteProtocolError`) or ``RemoteProtocolError`` itself;
encoders raise what :data:`chute.content.ENCODE_ERRORS` lists for values the
wire cannot carry. Pure: safe on any thread.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from chute.content import as_bool, decode_content, encode_content, malformed
from chute.core.model.store import StoredBlock
from chute.message import Message
from chute.protocol import peer_packets as peer
from chute.protocol import peer_stats
from chute.protocol import peer_stream_packets as peer_stream
from chute.protocol.packets import (
    PROTOCOL_VERSION,
    Ack,
    Browse,
    BrowseFetch,
    BrowsePage,
    BrowseResult,
    CallbackCreate,
    Commit,
    Connect,
    Connected,
    ConsumerClose,
    ConsumerOpen,
    Credit,
    CursorAck,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    CursorPage,
    DeadLetterRetry,
    DeadLetterRetryResult,
    DestinationCreate,
    DestinationDelete,
    DestinationPurge,
    Disconnect,
    Error,
    Header,
    Held,
    Move,
    Nack,
    Ok,
    PacketType,
    Ping,
    Pong,
    Rollback,
    SessionAckMode,
    SessionClose,
    SessionOpen,
    Stat,
    StatFetch,
    StatPage,
    StatResult,
    StreamConsumerOpen,
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
_BROWSE_ENTRY: Final = struct.Struct(">QIBqqI")

DECODE_ERRORS: Final = (
    struct.error,
    UnicodeDecodeError,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    OverflowError,
)
"""What a body decoder may raise on malformed input besides RemoteProtocolError."""

Encoder = Callable[[Any], tuple[int, int, bytes]]
"""packet → (target id, callback id, body bytes)"""
Decoder = Callable[[bytes, int, int, Header, int], Any]
"""(data, body start, body end, header, max properties) → packet"""


# -- packets that carry messages: BrowseResult and CursorPage --------------------------


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


def _encode_cursor_page(packet: CursorPage) -> tuple[int, int, bytes]:
    return 0, 0, _U64.pack(packet.next) + _encode_entries(packet.messages)


def encode_cursor_blocks(
    next_start: int,
    blocks: Sequence[StoredBlock],
    correlation_id: int,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """The whole CursorPage packet (header and body) whose messages are ``blocks``: the
    bytes ``encode_packet(CursorPage(next_start, ...), correlation_id)`` makes for the
    same messages, joined from the stored content blocks without a Message each.

    Raises:
        struct.error: a field out of range (never for blocks a store read back).
    """
    pack = _BROWSE_ENTRY.pack
    contents = [block[5] for block in blocks]
    parts: list[bytes | memoryview] = [b""] * (3 + 2 * len(blocks))
    parts[1] = _U64.pack(next_start)
    parts[2] = _U32.pack(len(blocks))
    parts[3::2] = [  # each entry's head, then its block
        pack(seq, delivery_count, redelivered, timestamp, expiration, len(content))
        for seq, delivery_count, redelivered, timestamp, expiration, content, _ in blocks
    ]
    parts[4::2] = contents
    size = 12 + _BROWSE_ENTRY.size * len(blocks) + sum(map(len, contents))
    parts[0] = HEADER.pack(
        size + HEADER_REST, version, PacketType.CURSOR_PAGE, correlation_id, 0, 0
    )
    return b"".join(parts)


def _decode_cursor_page(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> CursorPage:
    data = data[start:end]
    (next_start,) = _U64.unpack_from(data, 0)
    return CursorPage(next_start, _decode_entries(data, 8, max_properties, "CursorPage"))


_BROWSE_PAGE: Final = struct.Struct(">QQB")


def _encode_browse_page(packet: BrowsePage) -> tuple[int, int, bytes]:
    head = _BROWSE_PAGE.pack(packet.after, packet.before, bool(packet.done))
    return 0, 0, head + _encode_entries(packet.messages)


def _decode_browse_page(
    data: bytes, start: int, end: int, header: Header, max_properties: int
) -> BrowsePage:
    data = data[start:end]
    after, before, done = _BROWSE_PAGE.unpack_from(data, 0)
    entries = _decode_entries(data, _BROWSE_PAGE.size, max_properties, "BrowsePage")
    return BrowsePage(after, before, as_bool(done), entries)


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


def _read_tail16(r: _Reader) -> str | None:
    return None if r.pos == len(r.data) else _read_o16(r)


def _read_o32(r: _Reader) -> str | None:
    return _read_s32(r) if r.flag() else None


_ACK_MODES: Final = tuple(SessionAckMode)
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


def _seqs(values: tuple[int, ...]) -> bytes:
    return _U32.pack(len(values)) + b"".join(_U64.pack(v) for v in values)


def _read_seqs(r: _Reader) -> tuple[int, ...]:
    count = r.fixed(_U32)
    if count * _U64.size > len(r.data) - r.pos:  # refuse absurd counts before reading
        raise malformed("sequence list overruns the packet")
    return tuple(r.fixed(_U64) for _ in range(count))


def _counts(pairs: tuple[tuple[str, int], ...]) -> bytes:
    return _U32.pack(len(pairs)) + b"".join(_s16(a) + _U64.pack(n) for a, n in pairs)


def _read_counts(r: _Reader) -> tuple[tuple[str, int], ...]:
    count = r.fixed(_U32)
    if count * (2 + _U64.size) > len(r.data) - r.pos:
        raise malformed("count list overruns the packet")
    return tuple((_read_s16(r), r.fixed(_U64)) for _ in range(count))


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
    "t16": _Field(lambda v: b"" if v is None else _o16(v), _read_tail16),
    "strs": _Field(_strings, _read_strings),
    "seqs": _Field(_seqs, _read_seqs),
    "counts": _Field(_counts, _read_counts),
    "ack": _Field(
        lambda m: _U8.pack(_ACK_INDEX[SessionAckMode(m)]), lambda r: _ACK_MODES[r.fixed(_U8)]
    ),
}
_TARGET: Final = "target"
_CALLBACK: Final = "callback"

# Field order = dataclass field order; "target"/"callback" fields live in the header.
_SPECS: Final[dict[type, tuple[PacketType, tuple[str, ...]]]] = {
    Connect: (PacketType.CONNECT, ("u8", "u8", "o16", "o16", "o16", "u32")),
    Connected: (PacketType.CONNECTED, ("u8", "s16", "u32", "u32")),
    Ping: (PacketType.PING, ()),
    Pong: (PacketType.PONG, ()),
    Disconnect: (PacketType.DISCONNECT, ()),
    Error: (PacketType.ERROR, ("s16", "s32")),
    Ok: (PacketType.OK, ("o32",)),
    Held: (PacketType.HELD, ("s32", "u32")),
    SessionOpen: (PacketType.SESSION_OPEN, (_CALLBACK, "ack", "bool", "t16")),
    SessionClose: (PacketType.SESSION_CLOSE, (_TARGET,)),
    ConsumerOpen: (
        PacketType.CONSUMER_OPEN,
        (_TARGET, _CALLBACK, "s16", "o32", "u32", "bool", "o16", "bool", "bool"),
    ),
    ConsumerClose: (PacketType.CONSUMER_CLOSE, (_TARGET,)),
    StreamConsumerOpen: (
        PacketType.STREAM_CONSUMER_OPEN,
        (_TARGET, _CALLBACK, "s16", "s16", "o32", "u32"),
    ),
    Ack: (PacketType.ACK, (_TARGET, "u64", "bool", "u32")),
    Nack: (PacketType.NACK, (_TARGET, "u64", "bool")),
    Credit: (PacketType.CREDIT, (_TARGET, "u32")),
    Commit: (PacketType.COMMIT, (_TARGET,)),
    Rollback: (PacketType.ROLLBACK, (_TARGET,)),
    XaPrepare: (PacketType.XA_PREPARE, (_TARGET, "s16")),
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
    DestinationDelete: (PacketType.DESTINATION_DELETE, ("s16", "bool")),
    DestinationCreate: (PacketType.DESTINATION_CREATE, ("s16",)),
    DestinationPurge: (PacketType.DESTINATION_PURGE, ("s16",)),
    CursorOpen: (PacketType.CURSOR_OPEN, ("s16", "o16", "o32", "u32")),
    CursorInfo: (PacketType.CURSOR_INFO, ("u64", "u64")),
    CursorFetch: (PacketType.CURSOR_FETCH, ("s16", "o16", "u64", "u64", "u32", "u32")),
    CursorAck: (PacketType.CURSOR_ACK, ("s16", "s16", "u64")),
    CursorClose: (PacketType.CURSOR_CLOSE, ("s16", "s16", "bool")),
    BrowseFetch: (PacketType.BROWSE_FETCH, ("s16", "o32", "u64", "u64", "u32", "u32")),
    StatFetch: (PacketType.STAT_FETCH, ("o16", "s16", "u32")),
    StatPage: (PacketType.STAT_PAGE, ("s32", "o16")),
    Move: (PacketType.MOVE, ("s16", "s16", "o32", "seqs", "u32")),
    DeadLetterRetry: (PacketType.DEAD_LETTER_RETRY, ("s16", "o32", "seqs", "u32")),
    DeadLetterRetryResult: (PacketType.DEAD_LETTER_RETRY_RESULT, ("counts",)),
}


def _spec_codec(cls: type, kinds: tuple[str, ...]) -> tuple[Encoder, Decoder]:
    names = [f.name for f in dataclasses.fields(cls)]
    plan = list(zip(names, kinds, strict=True))

    def encode(packet: Any) -> tuple[int, int, bytes]:
        target = callback = 0
        parts: list[bytes] = []
        for name, kind in plan:
            value = getattr(packet, name)
            if kind == _TARGET:
                target = value
            elif kind == _CALLBACK:
                callback = value
            else:
                parts.append(_FIELDS[kind].encode(value))
        return target, callback, b"".join(parts)

    def decode(data: bytes, start: int, end: int, header: Header, max_properties: int) -> Any:
        data = data[start:end]
        r = _Reader(data)
        values: list[Any] = []
        for _name, kind in plan:
            if kind == _TARGET:
                values.append(header.target_id)
            elif kind == _CALLBACK:
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
    table[PacketType.BROWSE_RESULT] = Codec(
        PacketType.BROWSE_RESULT, BrowseResult, _encode_browse_result, _decode_browse_result
    )
    table[PacketType.CURSOR_PAGE] = Codec(
        PacketType.CURSOR_PAGE, CursorPage, _encode_cursor_page, _decode_cursor_page
    )
    table[PacketType.BROWSE_PAGE] = Codec(
        PacketType.BROWSE_PAGE, BrowsePage, _encode_browse_page, _decode_browse_page
    )
    table[PacketType.PEER_OPEN] = Codec(
        PacketType.PEER_OPEN, peer.PeerOpen, *_spec_codec(peer.PeerOpen, ("s16", "s16"))
    )
    table[PacketType.PEER_HANDOVER] = Codec(
        PacketType.PEER_HANDOVER, peer.PeerHandover, peer.encode_handover, peer.decode_handover
    )
    table[PacketType.PEER_HANDOVERS] = Codec(
        PacketType.PEER_HANDOVERS, peer.PeerHandovers, peer.encode_handovers, peer.decode_handovers
    )
    for tag, cls in (
        (PacketType.PEER_CONFIRM, peer.PeerConfirm),
        (PacketType.PEER_REFUSE, peer.PeerRefuse),
        (PacketType.PEER_RELEASE, peer.PeerRelease),
    ):
        table[tag] = Codec(tag, cls, peer.encode_keys, peer.keys_decoder(cls))
    table[PacketType.PEER_DEMAND] = Codec(
        PacketType.PEER_DEMAND, peer.PeerDemand, peer.encode_demand, peer.decode_demand
    )
    table[PacketType.PEER_RESUME] = Codec(
        PacketType.PEER_RESUME, peer.PeerResume, peer.encode_resume, peer.decode_resume
    )
    table[PacketType.PEER_STREAM_READ] = Codec(
        PacketType.PEER_STREAM_READ,
        peer_stream.PeerStreamRead,
        peer_stream.encode_read,
        peer_stream.decode_read,
    )
    table[PacketType.PEER_STREAM_RECORDS] = Codec(
        PacketType.PEER_STREAM_RECORDS,
        peer_stream.PeerStreamRecords,
        peer_stream.encode_records,
        peer_stream.decode_records,
    )
    table[PacketType.PEER_STATS_FETCH] = Codec(
        PacketType.PEER_STATS_FETCH,
        peer_stats.PeerStatsFetch,
        peer_stats.encode_fetch,
        peer_stats.decode_fetch,
    )
    table[PacketType.PEER_STATS_PAGE] = Codec(
        PacketType.PEER_STATS_PAGE,
        peer_stats.PeerStatsPage,
        peer_stats.encode_page,
        peer_stats.decode_page,
    )
    return table


SPEC_CODECS: Final = _build_table()
"""Body codecs by packet type tag: every type but Send and Deliver."""

__all__ = [
    "DECODE_ERRORS",
    "HEADER",
    "HEADER_REST",
    "HEADER_SIZE",
    "SPEC_CODECS",
    "Codec",
    "Decoder",
    "Encoder",
    "encode_cursor_blocks",
]
