"""The native protocol's cursor requests, what the Spark connector reads with: open,
fetch, acknowledge and close a cursor (``docs/spark.md``).

:class:`CursorRequests` holds their handlers, which
:class:`~chute.server.native.NativeConnection` inherits and registers with the others;
what a handler needs of its connection is :class:`CursorDriver`. A fetch of a
stream's range without a cursor is answered, where it can be, with the stream's
stored blocks as they are (one packet, no message decoded); any other fetch with a
page of delivered messages.
"""

from __future__ import annotations

from typing import Protocol

from chute.protocol import packets as p
from chute.protocol.spec import encode_cursor_blocks
from chute.server.native_manage import Driver, delivered_view


class CursorDriver(Driver, Protocol):
    """What a cursor handler needs of its native connection."""

    _out: list[bytes]

    def _confirm(self, header: p.Header, *, durable: bool) -> None: ...


class CursorRequests:
    """The handlers of the cursor packets, for :class:`~chute.server.native.NativeConnection`
    (which registers them with the others)."""

    def _on_cursor_open(self: CursorDriver, header: p.Header, packet: p.CursorOpen) -> None:
        earliest, head = self._core().cursor_open(
            packet.address, packet.cursor, selector=packet.selector, lease_ms=packet.lease_ms
        )
        self._respond(header, p.CursorInfo(earliest, head))

    def _on_cursor_fetch(self: CursorDriver, header: p.Header, packet: p.CursorFetch) -> None:
        core = self._core()
        if packet.cursor is None:  # a stream's range is sent as its stored blocks
            page = core.stream_blocks(
                packet.address,
                packet.start,
                packet.end,
                max_messages=packet.max_messages,
                max_bytes=packet.max_bytes or self.codec.max_packet_size // 2,
            )
            if page is not None:
                if header.correlation_id:
                    self._out.append(
                        encode_cursor_blocks(*page, header.correlation_id, self.codec.version)
                    )
                return
        next_start, entries = core.cursor_fetch(
            packet.address,
            packet.cursor,
            packet.start,
            packet.end,
            max_messages=packet.max_messages,
            max_bytes=packet.max_bytes or self.codec.max_packet_size // 2,
        )
        messages = tuple((e.seq, delivered_view(e)) for e in entries)
        self._respond(header, p.CursorPage(next_start, messages))

    def _on_cursor_ack(self: CursorDriver, header: p.Header, packet: p.CursorAck) -> None:
        self._core().cursor_ack(packet.address, packet.cursor, packet.end)
        self._confirm(header, durable=True)

    def _on_cursor_close(self: CursorDriver, header: p.Header, packet: p.CursorClose) -> None:
        self._core().cursor_close(packet.address, packet.cursor, delete=packet.delete)
        self._confirm(header, durable=packet.delete)
