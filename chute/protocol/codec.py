"""PacketCodec: the native protocol, sans-IO. Bytes in, packets out; packets in, bytes out.

The codec never touches a socket, so the TCP, TLS and WebSocket listeners and
both client drivers reuse it unchanged. It keeps no connection state beyond
the negotiated version: which packet may follow which is the business of the
server's connection handler and of :class:`chute.client.protocol.ClientProtocol`.

A ``PacketCodec`` is not thread-safe; each connection owns one.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Final

from chute.content import DEFAULT_MAX_PROPERTIES
from chute.errors import RemoteProtocolError
from chute.message import Message
from chute.protocol.columns import raw_cursor_page
from chute.protocol.packets import (
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Deliver,
    Header,
    Packet,
    PacketType,
)
from chute.protocol.spec import HEADER, HEADER_REST, HEADER_SIZE
from chute.protocol.splice import decode_deliveries
from chute.protocol.wire import VERSIONLESS, decode_body, encode_packet
from chute.sansio import CLOSED, NEED_DATA, NeedData

DeliverSink = Callable[[int, int, Message], None]
"""Takes a decoded Deliver as ``(consumer id, seq, message)``: see
:meth:`PacketCodec.next_packets`."""


_new_header: Final = tuple.__new__
_CURSOR_PAGE: Final = int(PacketType.CURSOR_PAGE)
_TYPE_OFFSET: Final = 5  # length u32 | version u8 | type u8
_SENDS: Final = frozenset({int(PacketType.SEND), int(PacketType.SEND_MANY)})
_ADDRESS_SIZE: Final = struct.Struct(">H")
_SEND_HEAD: Final = HEADER_SIZE + 8 + _ADDRESS_SIZE.size
"""A Send's (and SendMany's) header, its ttl u64 and its address's length u16."""


class PacketCodec:
    """Native protocol, sans-IO: bytes in, packets out. Never touches a socket.

    Buffering: the bytes of one read are parsed in place (packets are sliced out
    of them, never copied as a whole); only a packet split across reads is
    joined, once, when all its bytes have arrived. Feeding a packet byte by byte
    therefore costs O(n), not O(n²).

    Args:
        max_packet_size: the largest packet accepted, header included; a header
            announcing more is refused as soon as the header is read.
        max_properties: the most properties one message may carry.
        raw_pages: return each CursorPage undecoded, as a
            :class:`~chute.protocol.columns.RawCursorPage` (a client decodes its pages
            where it reads them, not on the thread that reads the socket).
    """

    __slots__ = (
        "_chunk_pos",
        "_chunks",
        "_data",
        "_eof",
        "_pending",
        "_pos",
        "max_packet_size",
        "max_properties",
        "raw_pages",
        "version",
    )

    def __init__(
        self,
        *,
        max_packet_size: int = 16 << 20,
        max_properties: int = DEFAULT_MAX_PROPERTIES,
        raw_pages: bool = False,
    ) -> None:
        self.max_packet_size = max_packet_size
        self.max_properties = max_properties
        self.raw_pages = raw_pages
        self.version = PROTOCOL_VERSION
        """The version written in outgoing headers; set it once negotiated."""
        self._data = b""  # the bytes being parsed, from _pos on
        self._pos = 0
        self._chunks: deque[bytes] = deque()  # later reads, parsed once _data is used up
        self._chunk_pos = 0  # where parsing starts in _chunks[0] (after a stitched packet)
        self._pending = 0  # unparsed bytes in _chunks
        self._eof = False

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as packets."""
        return len(self._data) - self._pos + self._pending

    def discard(self) -> None:
        """Drop every byte buffered (the connection is gone): a packet begun may be
        large, and the connection may outlive its loss until the garbage collector
        breaks its reference cycles."""
        self._data = b""
        self._pos = self._chunk_pos = self._pending = 0
        self._chunks.clear()

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` means the peer closed its side.

        Raises:
            RemoteProtocolError: data after EOF (a driver bug, reported as the peer's).
        """
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RemoteProtocolError("data received after end of stream", "eof-mid-packet")
        if type(data) is not bytes:
            data = bytes(data)
        if self._pos >= len(self._data) and not self._chunks:
            self._data = data
            self._pos = 0
        else:
            self._chunks.append(data)
            self._pending += len(data)

    def _gather(self, need: int) -> bool:
        """Make the next ``need`` bytes contiguous at ``_pos``; False if they have not all arrived.

        Only those bytes are copied: a packet split across reads is stitched from
        the tail of one read and the head of the next, and parsing then goes on
        in place in the next read (from ``_chunk_pos``). Joining whole reads
        instead would copy every byte once more (and allocate fresh ``mmap``
        pages for every large read).
        """
        have = len(self._data) - self._pos
        if have + self._pending < need:
            return False
        if not have:
            self._next_read()
            have = len(self._data) - self._pos
            if have >= need:
                return True
        parts = [self._data[self._pos :]]
        missing = need - have
        chunks = self._chunks
        while missing:
            chunk = chunks[0]
            start = self._chunk_pos
            available = len(chunk) - start
            if available <= missing:
                parts.append(chunk[start:] if start else chunk)
                chunks.popleft()
                self._chunk_pos = 0
                self._pending -= available
                missing -= available
            else:
                parts.append(chunk[start : start + missing])
                self._chunk_pos = start + missing
                self._pending -= missing
                missing = 0
        self._data = b"".join(parts)
        self._pos = 0
        return True

    def _next_read(self) -> None:
        """The current read is used up: parse the next one, from where stitching left it."""
        chunk = self._chunks.popleft()
        self._pending -= len(chunk) - self._chunk_pos
        self._data = chunk
        self._pos = self._chunk_pos
        self._chunk_pos = 0

    def next_packet(self) -> tuple[Header, Packet] | NeedData:
        """The next whole packet, or :data:`NEED_DATA` / :data:`CLOSED`.

        Raises:
            RemoteProtocolError: the peer broke the protocol (codes 'packet-too-large',
                'malformed-packet', 'unknown-packet-type', 'unsupported-version',
                'too-many-properties', 'eof-mid-packet'). Any other exception is a bug.
                After it the codec is unusable: send an Error and close.
        """
        data = self._data
        pos = self._pos
        if len(data) - pos < HEADER_SIZE:
            if not self._gather(HEADER_SIZE):
                return self._short()
            data = self._data
            pos = self._pos
        length, version, ptype, corr, target, callback = HEADER.unpack_from(data, pos)
        total = length + 4
        if total > self.max_packet_size:
            raise RemoteProtocolError(
                f"packet of {total} bytes exceeds the limit of {self.max_packet_size}",
                "packet-too-large",
            )
        if length < HEADER_REST:
            raise RemoteProtocolError(f"packet length {length} is too small", "malformed-packet")
        if version not in SUPPORTED_VERSIONS and ptype not in VERSIONLESS:
            raise RemoteProtocolError(
                f"protocol version {version} is not supported", "unsupported-version"
            )
        if len(data) - pos < total:
            if not self._gather(total):
                return self._short()
            data = self._data
            pos = self._pos
        self._pos = pos + total
        header = _new_header(Header, (version, corr, target, callback))
        if ptype == _CURSOR_PAGE and self.raw_pages:
            return header, raw_cursor_page(data, pos + HEADER_SIZE, pos + total)
        return header, decode_body(
            ptype, header, data, pos + HEADER_SIZE, pos + total, self.max_properties
        )

    def unfinished_send(self) -> str | None:
        """The address of the Send or SendMany being received, once its header and
        address are here and while the rest of it is not (else None): a driver may
        refuse the packet from it before its body arrives. Consumes nothing, raises
        nothing (an address that is not UTF-8 is the whole packet's error, later)."""
        head = self._peek(_SEND_HEAD)
        if len(head) < _SEND_HEAD or head[_TYPE_OFFSET] not in _SENDS:
            return None
        length, _, _, _, _, _ = HEADER.unpack_from(head, 0)
        if length + 4 <= self.buffered:
            return None  # all here: the packet is acted on whole
        (size,) = _ADDRESS_SIZE.unpack_from(head, _SEND_HEAD - _ADDRESS_SIZE.size)
        head = self._peek(_SEND_HEAD + size)
        if len(head) < _SEND_HEAD + size:
            return None
        try:
            return head[_SEND_HEAD:].decode()
        except UnicodeDecodeError:
            return None

    def _peek(self, size: int) -> bytes:
        """Up to ``size`` bytes from the read position on, without consuming them."""
        head = self._data[self._pos : self._pos + size]
        if len(head) >= size or not self._chunks:
            return head
        parts = [head]
        have = len(head)
        start = self._chunk_pos
        for chunk in self._chunks:
            part = chunk[start : start + size - have]
            parts.append(part)
            have += len(part)
            start = 0
            if have >= size:
                break
        return b"".join(parts)

    def next_packets(self, on_deliver: DeliverSink | None = None) -> list[tuple[Header, Packet]]:
        """Every whole packet buffered now (maybe none); the server calls it once per read.

        With ``on_deliver``, Deliver packets are not returned: each is handed to
        ``on_deliver(consumer_id, seq, message)`` as it is decoded (the broker
        fields set on the message), which spares the client a Deliver object
        and a header per message. Deliveries keep their order, and so do the
        other packets, but every delivery of the call is handed out before the
        caller sees the list; before an error, deliveries already decoded have
        been handed out.

        Raises:
            RemoteProtocolError: as :meth:`next_packet`; packets decoded before the bad
                one are lost, which is fine since the connection must close anyway.
        """
        out: list[tuple[Header, Packet]] = []
        append = out.append
        next_packet = self.next_packet
        while True:
            if on_deliver is not None:
                self._deliveries(on_deliver)
            item = next_packet()
            if item.__class__ is NeedData:
                return out
            packet = item[1]  # type: ignore[index]
            if on_deliver is not None and packet.__class__ is Deliver:
                on_deliver(packet.consumer_id, packet.seq, packet.message)
            else:
                append(item)  # type: ignore[arg-type]

    def _deliveries(self, on_deliver: DeliverSink) -> None:
        """Decode the run of whole Deliver packets at the read position, in place."""
        self._pos = decode_deliveries(
            self._data, self._pos, self.max_packet_size, self.max_properties, on_deliver
        )

    def _short(self) -> NeedData:
        if not self._eof:
            return NEED_DATA
        if self.buffered:
            raise RemoteProtocolError(
                f"connection closed in the middle of a packet ({self.buffered} bytes pending)",
                "eof-mid-packet",
            )
        return CLOSED

    def send(
        self,
        packet: Packet,
        *,
        correlation_id: int = 0,
        target_id: int | None = None,
        callback_id: int | None = None,
    ) -> bytes:
        """The bytes of ``packet``, to be written to the peer.

        ``target_id``/``callback_id`` default to the packet's own id fields
        (``Send.session_id``, ``Deliver.consumer_id``, ...), else 0.

        Raises:
            LocalProtocolError: the packet cannot be encoded.
        """
        return encode_packet(packet, correlation_id, target_id, callback_id, self.version)
