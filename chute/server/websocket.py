"""STOMP and the native protocol over WebSocket: the TCP drivers, fed by WebSocket
messages instead of a socket.

A browser (stomp.js) or any STOMP-over-WebSocket client opens ``/stomp`` (or
``/ws``) on the HTTP port, offering the ``v12.stomp``, ``v11.stomp`` or
``v10.stomp`` subprotocol. Every WebSocket message carries STOMP bytes: one
frame, several, part of one, or a heart-beat's EOL; text and binary messages
are treated alike. chute's own clients open ``/chute`` (``ws://host:8445/chute``)
and exchange native packets in binary messages, cut anywhere, as on TCP.

Rather than second drivers, :class:`WebSocketTransport` makes one
aiohttp :class:`~aiohttp.web.WebSocketResponse` look like the
``asyncio.Transport`` that :class:`~chute.server.stomp.StompConnection` and
:class:`~chute.server.native.NativeConnection` already drive, so the codecs,
logins, the journal's receipts, back pressure and heart-beats are the same code
on every listener:

- ``write`` queues one outgoing WebSocket message (the driver writes once per
  loop iteration, so a message holds every frame written in that iteration);
  a writer task sends them in order. For STOMP a message that is valid UTF-8
  goes out as text (what text-only clients such as the original stomp.js
  expect), any other (a binary body) as binary; native packets always go as
  binary.
- past ``HIGH_WATER`` bytes queued (:mod:`chute.outbox`), the driver's
  ``pause_writing`` runs (it stops reading and its consumers get nothing more)
  until the queue drains below ``LOW_WATER``; ``pause_reading`` holds the reader
  loop between messages.
- ``close`` sends what is queued (an ERROR frame) and then the close frame;
  ``abort`` drops it.

Limits: the WebSocket's STOMP connection has the ticket of the HTTP connection
under it (:mod:`chute.server.limits`), so the login deadline runs from the
TCP accept to the STOMP CONNECT, and the deadline's ERROR frame goes out over
the WebSocket. aiohttp's ``max_msg_size`` is fixed when the WebSocket is made,
so it is ``max_packet_size`` (plus room for the headers); before login the
HTTP listener's byte budget bounds what aiohttp buffers, and the STOMP codec
takes frames up to ``max_login_frame_size`` only.

Browsers: a request whose ``Origin`` the listener's :class:`~chute.origins.OriginPolicy`
does not allow is refused with 403 before any WebSocket is made, whoever the
client and whatever the login (a page from anywhere may make a browser open a
WebSocket to a broker on the user's loopback). A request with no ``Origin`` is
not from a browser and goes on. Over WSS the transport carries the TLS
``ssl_object``, so a client certificate names a user as on the TCP listeners.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from aiohttp import WSMsgType, web

from chute.origins import OriginPolicy
from chute.outbox import Outbox
from chute.server.host import ServerHost
from chute.server.native import NativeConnection
from chute.server.stomp import StompConnection
from chute.server.stream import StreamConnection

log = logging.getLogger("chute.server")

SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
NATIVE_SUBPROTOCOL = "chute"
"""Offered by chute's clients on ``/chute`` (a client offering none is served too)."""
CHUNK: Final = 1 << 20
"""The most a native client sends in one WebSocket message or POST (it cuts its writes so)."""
ALLOWANCE: Final = 64 << 10
"""What a message may carry beyond the largest packet (a header, the next packet's start)."""


def body_limit(max_packet_size: int) -> int:
    """The largest WebSocket message or POST body a native client may send."""
    return max(max_packet_size, CHUNK) + ALLOWANCE


class WebSocketTransport(asyncio.Transport):
    """The ``asyncio.Transport`` face of one server-side WebSocket; see the module docstring."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        protocol: asyncio.Protocol,
        extra: dict[str, Any],
        *,
        binary: bool = False,
    ) -> None:
        super().__init__(extra)
        self._ws = ws
        self._binary = binary  # every message binary (native packets), else text when UTF-8
        self._protocol = protocol
        self._out = Outbox(protocol)
        self._readable = asyncio.Event()
        self._readable.set()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    # -- asyncio.Transport ---------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._out.put(data)

    def is_closing(self) -> bool:
        return self._out.closing

    def close(self) -> None:
        """Send what is queued, then close the WebSocket (the writer task does both)."""
        self._out.close()
        self._readable.set()

    def abort(self) -> None:
        self._out.clear()
        self.close()

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    def is_reading(self) -> bool:
        return self._readable.is_set()

    def get_write_buffer_size(self) -> int:
        return self._out.queued

    # -- the two loops -------------------------------------------------------------------

    async def _send(self, chunk: bytes) -> None:
        if self._binary:
            await self._ws.send_bytes(chunk)
            return
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError:
            await self._ws.send_bytes(chunk)
        else:
            await self._ws.send_str(text)

    async def _write_loop(self) -> None:
        try:
            await self._out.drain(self._send, whole=False)
        except (ConnectionError, RuntimeError) as exc:  # the peer went away mid-write
            log.debug("WebSocket write failed: %s", exc)
            self._out.closing = True
        finally:
            self._readable.set()
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def read_loop(self) -> None:
        """Feed every incoming message to the protocol until the WebSocket closes."""
        ws = self._ws
        protocol = self._protocol
        while not self._out.closing:
            if not self._readable.is_set():
                await self._readable.wait()
                continue
            msg = await ws.receive()
            if msg.type is WSMsgType.BINARY:
                data = msg.data
            elif msg.type is WSMsgType.TEXT:
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode("utf-8")
            else:  # CLOSE, CLOSING, CLOSED or ERROR (a malformed WebSocket frame)
                if msg.type is WSMsgType.ERROR:
                    log.info("WebSocket error from %s: %s", self.get_extra_info("peername"), msg)
                break
            if not self._out.closing and data:
                protocol.data_received(data)

    async def finish(self) -> None:
        """Wait for the writer to flush and close (after :meth:`close` or the peer's close)."""
        self.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer


def refused_origin(
    origins: OriginPolicy, request: web.Request, what: str = "WebSocket"
) -> web.Response | None:
    """403 for a request from a browser page whose ``Origin`` may not use the broker
    (a page from anywhere may make a browser talk to a broker on the user's loopback);
    None to go on. A request with no ``Origin`` is not from a browser."""
    origin = request.headers.get("Origin")
    if origins.allows(origin):
        return None
    log.warning(
        "%s from %s refused: origin %r is not in server.allowed_origins",
        what,
        peer_of(request),
        origin,
    )
    return web.Response(
        status=403,
        text=f"origin {origin} may not use this broker: add it to [server] allowed_origins\n",
    )


def peer_of(request: web.Request) -> str:
    """``host:port`` of the client's end of the request's connection."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


async def stomp_endpoint(
    server: ServerHost, origins: OriginPolicy, request: web.Request
) -> web.StreamResponse:
    """The ``/stomp`` handler: one :class:`StompConnection` per WebSocket, for a client
    from an allowed origin."""
    return await _serve(
        server,
        origins,
        request,
        StompConnection(server),
        SUBPROTOCOLS,
        "this endpoint speaks STOMP over WebSocket only; "
        "open a WebSocket with subprotocol v12.stomp\n",
    )


async def native_endpoint(
    server: ServerHost, origins: OriginPolicy, request: web.Request
) -> web.StreamResponse:
    """A WebSocket on ``/chute``: one :class:`NativeConnection`, its packets in binary
    messages."""
    return await _serve(
        server,
        origins,
        request,
        NativeConnection(server),
        (NATIVE_SUBPROTOCOL,),
        "this endpoint speaks chute's native protocol over WebSocket "
        "(ws://HOST:PORT/chute) or over plain requests (POST /chute, see docs/protocol.md)\n",
    )


async def _serve(  # noqa: PLR0917 - private, called twice
    server: ServerHost,
    origins: OriginPolicy,
    request: web.Request,
    conn: StreamConnection,
    subprotocols: tuple[str, ...],
    not_websocket: str,
) -> web.StreamResponse:
    refused = refused_origin(origins, request)
    if refused is not None:
        return refused
    limit = server.config.limits.max_packet_size + ALLOWANCE
    if isinstance(conn, NativeConnection):  # a client cuts its writes at CHUNK
        limit = body_limit(server.config.limits.max_packet_size)
    ws = web.WebSocketResponse(
        protocols=subprotocols,
        max_msg_size=limit,
        compress=False,  # the broker's CPU is the bottleneck; bodies are often incompressible
        autoclose=True,
        autoping=True,
    )
    if not ws.can_prepare(request).ok:
        return web.Response(status=426, text=not_websocket, headers={"Upgrade": "websocket"})
    ticket = server.limits.ticket_of(request.transport) if request.transport else None
    if ticket is not None:
        ticket.stage = f"upgrading {request.path} to a WebSocket"
    await ws.prepare(request)
    if ticket is not None:
        ticket.stage = f"a WebSocket on {request.path}, not logged in"
    conn.ticket = ticket
    peer = request.transport.get_extra_info("peername") if request.transport else None
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    sock = request.transport.get_extra_info("socket") if request.transport else None
    transport = WebSocketTransport(  # its socket: whose input makes another's turn end
        ws,
        conn,
        {"peername": peer, "websocket": ws, "ssl_object": ssl_object, "socket": sock},
        binary=isinstance(conn, NativeConnection),
    )
    conn.protocol_name = f"{conn.protocol_name}/WebSocket"
    conn.connection_made(transport)
    try:
        await transport.read_loop()
    finally:
        conn.flush()
        await transport.finish()
        conn.connection_lost(None)
    return ws
