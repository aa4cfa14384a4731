"""Each connection's front: the protocol its transport has from accept to loss.

Handshakes in the open. Given ``create_server(ssl=...)``, asyncio and uvloop run
the handshake out of sight and report a failure only in debug mode: a client
speaking plain text to a TLS port, or offering a certificate of another CA,
would be cut off with nothing in the log. So a TLS listener accepts plain TCP
(:mod:`chute.server.listener`), and its :class:`TlsAccept` upgrades each
connection itself (``loop.start_tls``) once the client's first bytes arrive: a
failure is one log line naming the cause
(:func:`~chute.server.tls.handshake_failure`), and a success hands the TLS
transport to the listener's protocol as if ``create_server`` had made it, with
every byte decrypted before the hand-over. Until then, a connection is in its
:class:`Accepting`, so a stopping broker ends the handshake too. A plain
listener's :class:`PlainAccept` looks at the first bytes a client sends: a TLS
ClientHello there is logged ("use the TLS port", once per flood:
:class:`~chute.server.episode.Episode`) and the connection closed;
anything else goes to the protocol.

Fronts. :class:`PlainAccept` and :class:`TlsAccept` pass every event on to the
listener's protocol. So the connection's :class:`~chute.server.limits.Ticket`
is released however the connection ends, a listener with a budget (HTTP) stops
reading a client that has not logged in once it sent too many
(:meth:`~chute.server.limits.Ticket.received`), and the ticket's stage says how
far a connection that never logs in got (for the login deadline's log line).

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import cast

from chute.server import tls
from chute.server.limits import Ticket
from chute.server.tls import TLS_RECORD, ProtocolFactory

log = logging.getLogger("chute.server")

Front = Callable[[Ticket], asyncio.BaseProtocol]
"""Makes the protocol a connection's transport starts with (its front), for its ticket."""


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


class Accepting:
    """A broker's connections accepted but not yet handed to their protocol (TLS
    handshakes under way). Makes each listener's front protocol (:meth:`tls`,
    :meth:`plain`); :meth:`close` ends the handshakes when the broker stops. Loop only."""

    def __init__(self) -> None:
        self.pending: set[TlsAccept] = set()

    def tls(self, name: str, factory: ProtocolFactory, context: ssl.SSLContext) -> Front:
        """The front of a TLS listener called ``name`` (for log lines)."""
        return lambda ticket: TlsAccept(self, name, factory, context, ticket)

    @staticmethod
    def plain(name: str, factory: ProtocolFactory) -> Front:
        """The front of a plain listener called ``name`` (for log lines)."""
        return lambda ticket: PlainAccept(name, factory, ticket)

    def close(self) -> None:
        for accept in list(self.pending):
            accept.abort()
        self.pending.clear()


class PlainAccept(asyncio.Protocol):
    """A plain listener's connection, from its accept to its loss.

    Its protocol is made (``connection_made``) at once. The first bytes tell a TLS
    ClientHello (logged, and the connection closed) from the protocol's own speech,
    which is passed on, first bytes included. It stays the transport's protocol,
    passing every event on, so that the connection's ticket is released when it is
    lost, and a client with a budget (:class:`~chute.server.limits.Ticket`)
    is not read past it before logging in.
    """

    def __init__(self, name: str, factory: ProtocolFactory, ticket: Ticket) -> None:
        self.name = name
        self.ticket = ticket
        self.protocol = cast(asyncio.Protocol, factory())
        self.transport: asyncio.Transport | None = None
        self._head: bytes | None = b""  # None once the first bytes told

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.ticket.attach(transport)
        self.protocol.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.ticket.budget is not None:
            self.ticket.received(len(data))
        if self._head is None:
            self.protocol.data_received(data)
            return
        transport = self.transport
        if transport is None:
            return
        head = self._head + data
        if head == bytes([TLS_RECORD]):
            self._head = head  # one byte: wait for the next to tell
            return
        self._head = None
        if head[0] == TLS_RECORD and head[1] == 0x03:  # a record header: type, version 3.x
            self.ticket.limits.tls_on_plain_port(self.name, _peer(transport))
            transport.close()
            return
        self.protocol.data_received(head)

    def eof_received(self) -> bool | None:
        return self.protocol.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.ticket.release()
        self.protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()


class TlsAccept(asyncio.Protocol):
    """A TLS listener's connection: runs the handshake, logs a failure, hands a success on.

    The handshake starts once the client's first bytes (its ClientHello) arrive:
    reading pauses, ``loop.start_tls`` takes the transport over, and those bytes
    are fed to the TLS protocol before it starts its handshake (so a failure's log
    line can name an outdated version the hello offered). A client silent for
    :data:`~chute.server.tls.HANDSHAKE_TIMEOUT` is closed. From the handshake on
    this object is the TLS transport's protocol: what is decrypted before the
    hand-over is kept and passed on first, and after it every event is passed on,
    as :class:`PlainAccept` does (the ticket is released when the connection is
    lost). Until the client logs in, its ticket's stage counts the bytes
    decrypted since the handshake.
    """

    def __init__(
        self,
        accepting: Accepting,
        name: str,
        factory: ProtocolFactory,
        context: ssl.SSLContext,
        ticket: Ticket,
    ) -> None:
        self.accepting = accepting
        self.name = name
        self.factory = factory
        self.context = context
        self.ticket = ticket
        self.transport: asyncio.Transport | None = None
        self.protocol: asyncio.Protocol | None = None  # once handed over
        self.peer = "?"
        self._hello = bytearray()  # read before start_tls took the transport
        self._first = b""  # the start of the client's first bytes, for a failure's line
        self._early = bytearray()  # decrypted before the hand-over
        self._since = 0  # bytes decrypted since the handshake (counted until login)
        self._stage = ""  # the ticket's stage as this object last set it
        self._upgrading = False  # start_tls has the transport: data_received is decrypted
        self._eof = False
        self._lost = False
        self._task: asyncio.Task[None] | None = None
        self._silence: asyncio.TimerHandle | None = None  # closes a client that says nothing

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is not None or self._upgrading:  # the TLS transport's: no call
            return
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = _peer(transport)
        self.ticket.attach(transport)
        self.accepting.pending.add(self)
        self._set_stage("connected, no TLS handshake begun")
        self._silence = asyncio.get_running_loop().call_later(tls.HANDSHAKE_TIMEOUT, self._silent)

    def abort(self) -> None:
        """End the handshake (the broker stops)."""
        self._quiet()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # start_tls closes the transport
        if self.transport is not None:
            self.transport.abort()

    def _quiet(self) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None

    def _silent(self) -> None:
        """The client said nothing for :data:`~chute.server.tls.HANDSHAKE_TIMEOUT` seconds."""
        self._silence = None
        transport = self.transport
        if self._task is not None or transport is None:
            return
        self._fail(TimeoutError())
        transport.abort()

    def _set_stage(self, stage: str) -> None:
        self._stage = self.ticket.stage = stage

    def _count(self, size: int) -> None:
        """``size`` bytes decrypted: the stage says how many came since the handshake,
        until the client logs in or the protocol names a later stage."""
        ticket = self.ticket
        if ticket.authenticated or ticket.stage != self._stage:
            return
        self._since += size
        self._set_stage(f"past its TLS handshake, {self._since} bytes since")

    def _fail(self, exc: BaseException) -> None:
        """Log a failed handshake, once."""
        self._gone()
        if self.ticket.expired:  # the login deadline ended it, and said so
            level = logging.DEBUG
        elif type(exc) is ConnectionResetError:
            level = logging.INFO
        else:
            level = logging.WARNING
        trouble = (
            self.context.certificate_trouble()
            if isinstance(self.context, tls.ServerContext)
            else None
        )
        log.log(
            level,
            "%s: TLS handshake with %s failed: %s",
            self.name,
            self.peer,
            tls.handshake_failure(exc, hello=self._first, trouble=trouble),
        )

    async def _handshake(self, transport: asyncio.Transport) -> None:
        if transport.is_closing():  # gone before a word
            self._gone()
            return
        loop = asyncio.get_running_loop()
        # start_tls swaps the transport's protocol now and schedules its connection_made:
        # this callback, scheduled first, hands it the bytes read before the swap
        loop.call_soon(self._feed_hello, transport)
        self._upgrading = True
        self._set_stage("in its TLS handshake")
        try:
            secure = await loop.start_tls(
                transport,
                self,
                self.context,
                server_side=True,
                ssl_handshake_timeout=tls.HANDSHAKE_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            self._fail(exc)
            transport.abort()
            return
        if secure is None or self._lost or transport.is_closing():
            # gone during the handshake (start_tls may return a dead transport then) or
            # between its end and now
            self._gone()
            transport.abort()
            return
        self.accepting.pending.discard(self)
        protocol = self.protocol = cast(asyncio.Protocol, self.factory())
        self.ticket.attach(secure)
        self._set_stage(f"past its TLS handshake, {self._since} bytes since")
        protocol.connection_made(secure)
        if self._early:
            early = bytes(self._early)
            self._early.clear()
            self._pass_on(early)
        if self._eof and not protocol.eof_received():
            secure.close()

    def _gone(self) -> None:
        self._quiet()
        self.accepting.pending.discard(self)
        self.ticket.release()

    def _feed_hello(self, transport: asyncio.Transport) -> None:
        hello = memoryview(bytes(self._hello))
        self._hello.clear()
        tls_protocol = transport.get_protocol()
        if tls_protocol is self:  # start_tls failed before taking the transport
            return
        while hello:
            buffer = tls_protocol.get_buffer(len(hello))  # type: ignore[attr-defined]
            size = min(len(buffer), len(hello))
            buffer[:size] = hello[:size]
            tls_protocol.buffer_updated(size)  # type: ignore[attr-defined]
            hello = hello[size:]

    def _pass_on(self, data: bytes) -> None:
        if self.ticket.budget is not None:
            self.ticket.received(len(data))
        cast(asyncio.Protocol, self.protocol).data_received(data)

    # -- the raw transport's protocol until start_tls, then the TLS one's

    def data_received(self, data: bytes) -> None:
        if self._upgrading:  # decrypted
            self._count(len(data))
            if self.protocol is not None:
                self._pass_on(data)
            else:
                self._early += data
            return
        self._hello += data
        transport = self.transport
        if self._task is None and transport is not None:
            self._quiet()
            self._first = bytes(data[:16])
            transport.pause_reading()  # start_tls resumes it
            self._task = asyncio.get_running_loop().create_task(
                self._handshake(transport), name=f"{self.name}-handshake"
            )

    def eof_received(self) -> bool | None:
        if self.protocol is not None:
            return self.protocol.eof_received()
        if not self._upgrading:
            return None  # closed before the handshake began
        self._eof = True
        return True  # keep the transport open for the protocol to decide

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._quiet()
        self.accepting.pending.discard(self)
        self.transport = None
        if self.protocol is not None:
            self.ticket.release()
            self.protocol.connection_lost(exc)
        elif not self._upgrading:  # lost before start_tls took the transport
            self.ticket.release()

    def pause_writing(self) -> None:
        if self.protocol is not None:
            self.protocol.pause_writing()

    def resume_writing(self) -> None:
        if self.protocol is not None:
            self.protocol.resume_writing()
