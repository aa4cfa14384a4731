"""What a client queues for the broker: :class:`Output`, the base of
:class:`~chute.client.protocol.ClientProtocol`.

It owns the output buffer, the requests awaiting an answer
(:class:`~chute.client.correlation.Correlator`), the sessions (whose one-way packets
go here), and the send paths: a persistent send outside a transaction is a request
(the broker answers once the message is on disk); the rest are one-way. The common
message (bytes body, generated id, no optional header nor property) is encoded in one
``pack`` by :func:`chute.protocol.splice.plain_send_encoder`; anything else becomes a
content block through :mod:`chute.client.outgoing`, as a ``send_many``'s messages do
(one SendMany packet per run of blocks). Pure: no sockets, no threads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeVar

from chute.client.correlation import Correlator
from chute.client.outgoing import DEFAULT_OPTIONS, SendFields, content_of
from chute.client.sessions import Sessions
from chute.core.model.address import canonical
from chute.errors import InvalidMessage
from chute.message import new_message_id
from chute.protocol.codec import PacketCodec
from chute.protocol.packets import SEND_MANY_MAX, Packet
from chute.protocol.splice import (
    PlainSend,
    encode_send,
    encode_send_many,
    encode_send_many_framed,
    plain_send_encoder,
)
from chute.protocol.wire import encode_packet

_ADDRESS_CACHE_SIZE: Final = 1024
# a packet's header: length u32 | version u8 | type u8 | correlation u32 | target u32 | ...
_VERSION_AT: Final = 4
_CALLBACK_AT: Final = 14
_RESENT_HEAD: Final = struct.Struct(">BB")
_CORR_TARGET: Final = struct.Struct(">II")
_next_id: Final = new_message_id.next_bytes

_Messages = TypeVar("_Messages")
SendEncoder = Callable[[int, bytes, _Messages, int, int, int], bytes]
"""A send path's encoder: ``(session id, address, its messages, ttl ms, correlation id,
version) -> packet``, as :func:`~chute.protocol.splice.encode_send` and
:func:`~chute.protocol.splice.encode_send_many`."""


def _encode_framed(  # noqa: PLR0917 - a SendEncoder
    session_id: int,
    address: bytes,
    framed: tuple[int, bytes | memoryview],
    ttl_ms: int,
    correlation_id: int,
    version: int,
) -> bytes:
    """:func:`~chute.protocol.splice.encode_send_many_framed` as a :data:`SendEncoder`
    of (count, framed blocks)."""
    count, blocks = framed
    return encode_send_many_framed(
        session_id, address, count, blocks, ttl_ms, correlation_id, version
    )


class Output:
    """The output buffer, the requests opened and the sends encoded; see the module
    docstring. Not thread-safe."""

    def __init__(self, codec: PacketCodec) -> None:
        self.codec = codec
        self._out: list[bytes] = []
        self.outbox_size = 0
        """Bytes waiting in the output buffer."""
        self._requests = Correlator()
        self.sessions = Sessions(self._oneway)
        """The sessions and consumers: what ``take``, ``before_wait``, ``ack`` and
        ``nack`` of a consumer go to."""
        self._sessions_by_id = self.sessions.by_id
        self._addresses: dict[str, tuple[bytes, PlainSend]] = {}
        self.last_packet = b""
        """The packet of the latest SEND or SEND_MANY queued (what :meth:`resend` takes)."""

    def data_to_send(self) -> bytes:
        """Everything queued for the broker (and empty the queue)."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.outbox_size = 0
        return data

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self.outbox_size += len(data)

    def _oneway(self, packet: Packet) -> None:
        self._write(encode_packet(packet, version=self.codec.version))

    def _request(self, packet: Packet) -> int:
        corr = self._requests.open()
        self._write(encode_packet(packet, corr, version=self.codec.version))
        return corr

    # -- sends ----------------------------------------------------------------------

    def send(
        self,
        session_id: int,
        address: str,
        body: bytes | str,
        options: SendFields = DEFAULT_OPTIONS,
    ) -> int:
        """Queue a SEND of ``body`` to ``address`` with ``options`` (the message's other
        fields). Returns the correlation id to wait for, or 0 for a one-way send.

        Raises:
            InvalidAddress, InvalidMessage: bad address or message field.
            ValueError: a negative ``ttl``.
            ChuteError: an error deferred to this session (a failed earlier send).
        """
        session = self._sessions_by_id.get(session_id)
        if session is None or session.error is not None or self.sessions.failure is not None:
            session = self.sessions.session(session_id)  # raises
        cached = self._addresses.get(address)
        if cached is None:
            cached = self._address(address)
        priority, ttl, properties, persistent, correlation_id, reply_to, type, id, kind = options
        if (
            body.__class__ is bytes
            and id is None
            and kind is None
            and not properties
            and correlation_id is None
            and reply_to is None
            and type is None
            and priority.__class__ is int
            and 0 <= priority <= 9
        ):
            # The common message: its whole packet in one pack (no Message, no join).
            if ttl < 0:
                raise ValueError("ttl must not be negative")
            corr = self._requests.open() if persistent and not session.transacted else 0
            try:
                packet = cached[1](
                    body,
                    self.codec.version,
                    corr,
                    session_id,
                    ttl,
                    priority,
                    persistent,
                    _next_id(),
                )
            except struct.error as exc:  # ttl or session id out of range
                self._requests.cancel(corr)
                raise InvalidMessage(f"message cannot be encoded: {exc}") from None
            self._out.append(packet)
            self.outbox_size += len(packet)
            self.last_packet = packet
            return corr
        # anything else: a content block of its fields
        content = content_of(body, options)
        request = persistent and not session.transacted
        return self._queue_send(request, encode_send, session_id, cached[0], content, ttl)

    def resend(self, session_id: int, packet: bytes) -> int:
        """Queue ``packet``, a SEND or SEND_MANY request this client encoded before (maybe
        on another connection: :attr:`last_packet`), again, for session ``session_id``
        as a new request: the same messages, the same ids. Returns its correlation id.

        Raises:
            ChuteError: as :meth:`send` (the connection failed, a deferred error).
        """
        self.sessions.session(session_id)  # raises a deferred error
        corr = self._requests.open()
        self._write(
            b"".join(
                (
                    packet[:_VERSION_AT],
                    _RESENT_HEAD.pack(self.codec.version, packet[_VERSION_AT + 1]),
                    _CORR_TARGET.pack(corr, session_id),
                    packet[_CALLBACK_AT:],
                )
            )
        )
        return corr

    def send_many(self, session_id: int, address: str, contents: list[bytes], ttl: int = 0) -> int:
        """Queue one SEND_MANY of content blocks (see
        :func:`chute.client.outgoing.contents_of`). Returns the
        correlation id to wait for, or 0 in a transacted session (one-way, as its sends).

        Raises:
            InvalidAddress: a bad address. InvalidMessage: too many or too large to
                encode. ValueError: a negative ``ttl``.
            ChuteError: an error deferred to this session (a failed earlier send).
        """
        session = self.sessions.session(session_id)  # raises a deferred error
        address_bytes = (self._addresses.get(address) or self._address(address))[0]
        return self._queue_send(
            not session.transacted, encode_send_many, session_id, address_bytes, contents, ttl
        )

    def send_many_framed(
        self, session_id: int, address: str, count: int, framed: bytes | memoryview, ttl: int = 0
    ) -> int:
        """As :meth:`send_many`, of ``count`` content blocks already framed and joined
        (see :func:`chute.protocol.splice.encode_send_many_framed`; at most
        :data:`~chute.protocol.packets.SEND_MANY_MAX`)."""
        session = self.sessions.session(session_id)  # raises a deferred error
        address_bytes = (self._addresses.get(address) or self._address(address))[0]
        if not 0 < count <= SEND_MANY_MAX:
            raise InvalidMessage(f"a SendMany carries 1 to {SEND_MANY_MAX} messages, not {count}")
        return self._queue_send(
            not session.transacted, _encode_framed, session_id, address_bytes, (count, framed), ttl
        )

    def _queue_send(  # noqa: PLR0917 - private, called positionally
        self,
        request: bool,
        encode: SendEncoder[_Messages],
        session_id: int,
        address_bytes: bytes,
        messages: _Messages,
        ttl: int,
    ) -> int:
        """Queue the packet ``encode`` makes of ``messages`` (what differs between the
        send paths), as a request if ``request`` (its correlation id opened first, and
        cancelled if the packet cannot be encoded). Returns the correlation id, or 0.

        Raises:
            ValueError: a negative ``ttl``.
            InvalidMessage: a number out of its field's range.
            ChuteError: the connection failed (opening the request).
        """
        if ttl < 0:
            raise ValueError("ttl must not be negative")
        corr = self._requests.open() if request else 0
        try:
            packet = encode(session_id, address_bytes, messages, ttl, corr, self.codec.version)
        except struct.error as exc:  # ttl or session id out of range
            self._requests.cancel(corr)
            what = "message" if encode is encode_send else "messages"
            raise InvalidMessage(f"{what} cannot be encoded: {exc}") from None
        self._write(packet)
        self.last_packet = packet
        return corr

    def _address(self, address: str) -> tuple[bytes, PlainSend]:
        encoded = canonical(address).encode()
        if len(self._addresses) >= _ADDRESS_CACHE_SIZE:
            self._addresses.clear()
        cached = self._addresses[address] = (encoded, plain_send_encoder(encoded))
        return cached
