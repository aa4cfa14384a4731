"""TLS on the broker's listeners: one server context, handshakes whose failures are
told, and the user a client certificate names.

One context. Every TLS listener (the native protocol's ``tls_port``, STOMP's
``stomp_tls_port``, HTTPS and WSS on ``http_port`` with ``http_tls``) uses the
context :func:`server_context` builds once from ``tls_cert``, ``tls_key``,
``tls_ca`` and ``tls_client_certs``: TLS 1.2 or later, and, unless client
certificates are ``"none"``, a request for the client's certificate, verified
against ``tls_ca`` alone (never the system's store: any certificate that CA
signs names a user).

Handshakes in the open. Given ``create_server(ssl=...)``, asyncio and uvloop run
the handshake out of sight and report a failure only in debug mode: a client
speaking plain text to a TLS port, or offering a certificate of another CA,
would be cut off with nothing in the log. So a TLS listener accepts plain TCP
(:mod:`chute.server.listener`), and its :class:`TlsAccept` upgrades each
connection itself (``loop.start_tls``): a failure is one log line naming the
cause (plain text, no certificate, a certificate the CA did not sign, a client
that distrusts the broker's certificate), and a success hands the TLS transport
to the listener's protocol as if ``create_server`` had made it. Until then, a
connection is in its :class:`Accepting`, so a stopping broker ends the
handshake too. A plain listener's :class:`PlainAccept` looks at the first bytes
a client sends: a TLS ClientHello there is logged ("use the TLS port", once per
flood: :class:`~chute.server.episode.Episode`) and the connection closed;
anything else goes to the protocol.

Fronts. :class:`PlainAccept` and :class:`TlsAccept` are each connection's front:
the protocol its transport has from accept to loss, passing every event on to
the listener's protocol. So the connection's
:class:`~chute.server.limits.Ticket` is released however the connection
ends, and a listener with a budget (HTTP) stops reading a client that has not
logged in once it sent too many (:meth:`~chute.server.limits.Ticket.received`).

Client certificates. With ``tls_client_certs = "optional"`` a client may send
no certificate; with ``"required"`` it must. A certificate that does not chain
to ``tls_ca`` fails the handshake either way. :func:`certificate_user` names
the user of a verified certificate, its subject's commonName; what that user
may do is the core's business (:mod:`chute.core.access`).

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Final, cast

from chute.server.limits import Ticket

log = logging.getLogger("chute.server")

ProtocolFactory = Callable[[], asyncio.BaseProtocol]
Front = Callable[[Ticket], asyncio.BaseProtocol]
"""Makes the protocol a connection's transport starts with (its front), for its ticket."""

CLIENT_CERTS: Final = ("none", "optional", "required")
"""``tls_client_certs``: whether a client is asked for a certificate, and must send one."""
HANDSHAKE_TIMEOUT: Final = 15.0
"""Seconds a client has to complete its TLS handshake."""

_VERIFY_MODES: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_TLS_RECORD: Final = 0x16  # a TLS record of type handshake: how a ClientHello begins
_PLAIN_TEXT_REASONS: Final = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
        "UNKNOWN_PROTOCOL",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
        "UNEXPECTED_RECORD",
        "WRONG_SSL_VERSION",
        "UNSUPPORTED_PROTOCOL",
    }
)


def server_context(
    cert: str, key: str = "", *, ca: str = "", client_certs: str = "none"
) -> ssl.SSLContext:
    """The context every TLS listener shares (TLS 1.2 or later).

    ``client_certs`` is ``"none"`` (no client certificate asked for), ``"optional"`` or
    ``"required"``; the last two verify a client's certificate against ``ca`` only.

    Raises:
        OSError: the certificate, key or CA cannot be loaded (with the file names).
        ValueError: an unknown ``client_certs``, or one that needs a ``ca`` without it.
    """
    mode = _VERIFY_MODES.get(client_certs)
    if mode is None:
        raise ValueError(f"client_certs must be one of {', '.join(CLIENT_CERTS)}")
    if mode != ssl.CERT_NONE and not ca:
        raise ValueError(f"client_certs = {client_certs!r} needs the CA that signs them")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no system CAs: tls_ca alone is trusted
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"cannot load the TLS certificate {cert!r} / key {key!r}: {exc}") from None
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"cannot load the client CA file {ca!r}: {exc}") from None
    context.verify_mode = mode
    return context


def certificate_user(transport: asyncio.BaseTransport) -> str | None:
    """The user a TLS client's verified certificate names: its subject's commonName.

    None over plain TCP, without a certificate, or when the subject has no single
    commonName (several are ambiguous: none of them is believed).
    """
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()  # only a certificate the handshake verified
    if not cert:
        return None
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    if len(names) != 1:
        if names:
            log.warning("client certificate with several commonNames %s: no user taken", names)
        return None
    return str(names[0])


def handshake_failure(exc: BaseException) -> str:
    """What a failed server-side handshake means, for the one log line it gets."""
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or type(exc).__name__
        if reason in _PLAIN_TEXT_REASONS:
            return f"it sent plain text, not TLS ({reason}): the client must connect with TLS"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return (
                "it sent no client certificate, and server.tls_client_certs = "
                f'"required" ({reason})'
            )
        if isinstance(exc, ssl.SSLCertVerificationError):
            detail = exc.verify_message or reason
            return f"its client certificate did not verify against server.tls_ca ({detail})"
        if "ALERT" in reason:
            return f"the client refused the handshake ({reason}): does it trust server.tls_cert?"
        return f"{reason}"
    if isinstance(exc, TimeoutError | ConnectionAbortedError):
        return f"no TLS handshake within {HANDSHAKE_TIMEOUT:g} s"
    if isinstance(exc, ConnectionError):
        return "the client closed the connection during the handshake"
    return str(exc) or type(exc).__name__


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
        if head == bytes([_TLS_RECORD]):
            self._head = head  # one byte: wait for the next to tell
            return
        self._head = None
        if head[0] == _TLS_RECORD and head[1] == 0x03:  # a record header: type, version 3.x
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

    ``loop.start_tls`` takes the transport over only when this connection's task
    runs, and uvloop starts reading as soon as :meth:`connection_made` returns, so
    the ClientHello may reach this object first: it is kept (reading pauses) and fed
    to the TLS protocol before that protocol starts its handshake. From the
    handshake on this object is the TLS transport's protocol: what arrives before
    the hand-over is kept and passed on, and after it every event is passed on, as
    :class:`PlainAccept` does (the ticket is released when the connection is lost).
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
        self._early = bytearray()  # decrypted before the hand-over
        self._upgrading = False  # start_tls has the transport: data_received is decrypted
        self._eof = False
        self._lost = False
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._task is not None:  # the TLS transport's protocol now (no call is made)
            return
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = _peer(transport)
        self.ticket.attach(transport)
        self.accepting.pending.add(self)
        self._task = asyncio.get_running_loop().create_task(
            self._handshake(cast(asyncio.Transport, transport)), name=f"{self.name}-handshake"
        )

    def abort(self) -> None:
        """End the handshake (the broker stops)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()  # start_tls closes the transport
        if self.transport is not None:
            self.transport.abort()

    async def _handshake(self, transport: asyncio.Transport) -> None:
        if transport.is_closing():  # gone before a word
            self._gone()
            return
        loop = asyncio.get_running_loop()
        # start_tls swaps the transport's protocol now and schedules its connection_made:
        # this callback, scheduled first, hands it the bytes read before the swap
        loop.call_soon(self._feed_hello, transport)
        self._upgrading = True
        self.ticket.stage = "in its TLS handshake"
        try:
            tls = await loop.start_tls(
                transport,
                self,
                self.context,
                server_side=True,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            self._gone()
            if self.ticket.expired:  # the login deadline ended it, and said so
                level = logging.DEBUG
            elif type(exc) is ConnectionResetError:
                level = logging.INFO
            else:
                level = logging.WARNING
            log.log(
                level,
                "%s: TLS handshake with %s failed: %s",
                self.name,
                self.peer,
                handshake_failure(exc),
            )
            transport.abort()
            return
        if tls is None or self._lost or transport.is_closing():
            # gone during the handshake (start_tls may return a dead transport then) or
            # between its end and now
            self._gone()
            transport.abort()
            return
        self.accepting.pending.discard(self)
        protocol = self.protocol = cast(asyncio.Protocol, self.factory())
        self.ticket.attach(tls)
        self.ticket.stage = f"past its TLS handshake, {len(self._early)} bytes since"
        protocol.connection_made(tls)
        if self._early:
            early = bytes(self._early)
            self._early.clear()
            self.data_received(early)
        if self._eof and not protocol.eof_received():
            tls.close()

    def _gone(self) -> None:
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

    # -- the raw transport's protocol until start_tls, then the TLS one's

    def data_received(self, data: bytes) -> None:
        if self.protocol is not None:
            if self.ticket.budget is not None:
                self.ticket.received(len(data))
            self.protocol.data_received(data)
            return
        if self._upgrading:
            self._early += data
            return
        self._hello += data
        if self.transport is not None:
            self.transport.pause_reading()  # start_tls resumes it

    def eof_received(self) -> bool | None:
        if self.protocol is not None:
            return self.protocol.eof_received()
        if not self._upgrading:
            return None  # closed before the handshake began
        self._eof = True
        return True  # keep the transport open for the protocol to decide

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
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
