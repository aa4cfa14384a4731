"""The native protocol over plain HTTP requests, where only they get through.

JBoss Messaging 2.0's remote API carried its packets over HTTP "when TCP/IP is
not possible (e.g. firewall)": HTTP as a tunnel for the same packet codec, with
server-to-client packets pushed rather than polled for. Some proxies pass
neither ``CONNECT`` nor a WebSocket upgrade, only requests; this is for them.
Everything lives under ``/chute`` on the HTTP port (HTTPS with ``http_tls``):

``POST /chute``
    Open a session: ``201`` with ``{"session": ID, "poll_ms": N}``. The session
    is one :class:`~chute.server.native.NativeConnection`, as a TCP connection
    or a WebSocket would make: the same login, permissions and limits.
``POST /chute/ID``
    Packets from the client, the body's bytes cut anywhere, as on TCP
    (``Content-Type: application/x-chute``; ``Chute-Seq: n``, 1, 2, 3, ...).
    ``204`` once they were handed to the connection. A body whose ``Chute-Seq``
    was taken already is a retry after a lost answer: ``204``, not fed twice;
    one sent again while the first is still held (a proxy gave up on it) is
    answered as the first is. Another POST while one is held: ``409``.
``GET /chute/ID?ack=n``
    Packets to the client, pushed as soon as there are some: the request is
    held until the connection wrote something (or ``poll_ms`` passed: ``204``),
    then answered ``200`` with every byte written so far and ``Chute-Seq:
    n + 1``. Its next poll says ``ack=n + 1``; a poll that still says ``ack=n``
    did not get that answer (a proxy dropped it) and gets the same bytes again.
    ``410`` once the session has ended and everything was fetched.
``DELETE /chute/ID``
    End the session (``204``), as closing a socket does.

Flow control: bytes written for the client and not yet fetched are bounded
(:data:`chute.outbox.HIGH_WATER`): past it the driver's ``pause_writing`` runs, so a slow
poller stops its deliveries rather than grow the broker. A POST waits while the
driver has paused reading (a blocked send, its turn), as a socket's bytes wait
in the kernel. A session with no request for ``http_session_timeout_ms`` has
gone away: its connection closes (unacknowledged messages go back).

Safety: session ids are 192 random bits; a request naming an unknown one gets
``404``. Browsers: a request whose ``Origin`` the broker does not allow is
refused (``403``), and a POST must say ``application/x-chute``, a type a page
cannot send across origins without a preflight this endpoint never answers.
Every session holds a :class:`~chute.server.limits.Ticket` (``max_connections``,
per host, the login deadline); until its connection logged in, a POST's body is at
most the login budget (``max_login_frame_size`` and a little, ``413`` past it),
refused from its ``Content-Length`` or as it comes, so a stranger cannot make the
broker hold a body of ``max_packet_size``.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from chute.origins import OriginPolicy
from chute.outbox import Outbox
from chute.server.host import ServerHost
from chute.server.limits import Ticket
from chute.server.native import NativeConnection
from chute.server.websocket import body_limit, peer_of, refused_origin

log = logging.getLogger("chute.server")

CONTENT_TYPE: Final = "application/x-chute"
SEQ: Final = "Chute-Seq"
MAX_ANSWER: Final = 4 << 20
"""The most one poll's answer carries (the rest waits for the next poll)."""
DRAIN: Final = 2 << 20
"""A refused body announced as at most this long is read and dropped before the close."""
DRAIN_S: Final = 1.0
"""... for at most this long."""


class TunnelTransport(asyncio.Transport):
    """The ``asyncio.Transport`` face of one session: what the driver writes waits
    for the client's next poll; what it POSTs is fed to the driver."""

    def __init__(self, session: TunnelSession, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._session = session

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._session.out.put(data)

    def is_closing(self) -> bool:
        return self._session.closing

    def close(self) -> None:
        self._session.end(flush=True)

    def abort(self) -> None:
        self._session.end(flush=False)

    def pause_reading(self) -> None:
        self._session.readable.clear()

    def resume_reading(self) -> None:
        self._session.readable.set()

    def is_reading(self) -> bool:
        return self._session.readable.is_set()

    def get_write_buffer_size(self) -> int:
        return self._session.out.queued


class TunnelSession:
    """One client's session: its connection, the bytes it is owed, the sequence numbers."""

    def __init__(self, tunnels: Tunnels, sid: str, conn: NativeConnection, ticket: Ticket) -> None:
        self.tunnels = tunnels
        self.sid = sid
        self.conn = conn
        self.ticket = ticket
        self.readable = asyncio.Event()
        self.readable.set()
        self.ended = False  # the connection is gone (connection_lost ran)
        self.out = Outbox(conn)  # what the connection wrote and no poll took yet
        self._answered: tuple[int, bytes] | None = None  # the last answer, until acked
        self._acked = 0  # the Chute-Seq of the last answer the client confirmed
        self._received = 0  # the Chute-Seq of the last POST fed
        self._poll: asyncio.Event | None = None  # set to end the poll held now
        self._busy = 0  # requests in progress
        self._posting: asyncio.Future[bool] | None = None  # the POST being read or fed
        self._posting_seq = 0  # its Chute-Seq
        self._idle: asyncio.TimerHandle | None = None
        self._touch()

    # -- the driver's side ---------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """The connection closes: nothing more is written or fed."""
        return self.out.closing

    def end(self, *, flush: bool) -> None:
        """The driver closes (``flush``: after the client fetched what is queued) or
        aborts; the connection is lost once it is fetched, or at once."""
        if not flush:
            self.out.clear()
        self.out.close()
        self.readable.set()
        if not self.out:
            self._lost()

    def _lost(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.out.close()
        if self._idle is not None:
            self._idle.cancel()
        self.tunnels.forget(self)
        self.conn.connection_lost(None)
        self.ticket.release()

    # -- requests ------------------------------------------------------------------------

    def _touch(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._busy == 0 and not self.ended:
            self._idle = asyncio.get_running_loop().call_later(
                self.tunnels.session_timeout, self._expired
            )

    def _expired(self) -> None:
        self._idle = None
        log.info(
            "native over HTTP: session from %s ended: no request for %g s "
            "(server.http_session_timeout_ms)",
            self.conn.peer,
            self.tunnels.session_timeout,
        )
        self.end(flush=False)

    async def post(
        self, seq: int, body: Callable[[], Awaitable[bytes | web.Response]]
    ) -> web.Response:
        """Feed the POST's body (read by ``body`` only once it is this POST's turn) to
        the connection, in ``seq`` order. One POST at a time: a client sends them in
        order, one after the other, and a second one waiting would hold its body."""
        posting = self._posting
        if posting is not None:
            if seq != self._posting_seq:
                return _error(409, "a POST of this session is in progress: send one at a time")
            # the same body again: a proxy or the client gave up on the first request
            # while it waited for the connection to read; its outcome is this one's
            self._busy += 1
            try:
                fed = await asyncio.shield(posting)
            finally:
                self._busy -= 1
                self._touch()
            if fed:
                return web.Response(status=204)
            return await self.post(seq, body)  # the first was not fed: this one may be
        self._posting = asyncio.get_running_loop().create_future()
        self._posting_seq = seq
        self._busy += 1
        self._touch()
        fed = False
        try:
            if seq <= self._received:  # a retry of a body already fed
                fed = True
                return web.Response(status=204)
            if seq != self._received + 1:
                return _error(409, f"{SEQ} {seq} out of order: expected {self._received + 1}")
            data = await body()
            if isinstance(data, web.Response):
                return data
            while not self.readable.is_set() and not self.closing:
                await self.readable.wait()
            if self.closing:
                return _error(410, "the session has ended")
            self._received = seq
            self.conn.data_received(data)
            fed = True
            return web.Response(status=204)
        finally:
            self._posting.set_result(fed)
            self._posting = None
            self._busy -= 1
            self._touch()

    async def poll(self, ack: int) -> web.Response:
        """Answer with what the connection wrote (held until there is some)."""
        self._busy += 1
        self._touch()
        try:
            answered = self._answered
            if answered is not None:
                if ack == answered[0] - 1:  # that answer was lost on the way: again
                    return self._answer(*answered)
                if ack != answered[0]:
                    return _error(409, f"ack={ack} is not {answered[0] - 1} or {answered[0]}")
                self._acked = ack
                self._answered = None
            elif ack != self._acked:
                return _error(409, f"ack={ack}: the last answer was {self._acked}")
            if self._poll is not None:  # one poll at a time: the newer one takes over
                self._poll.set()
            ended = self._poll = asyncio.Event()
            deadline = time.monotonic() + self.tunnels.poll_timeout
            while not self.out and not self.closing and not ended.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.out.wake.clear()
                await _first(self.out.wake, ended, within=remaining)
            if self._poll is ended:
                self._poll = None
            if not self.out:
                if self.closing:
                    self._lost()
                    return _error(410, "the session has ended")
                return web.Response(status=204)
            data = self.out.take(MAX_ANSWER)
            self._answered = (self._acked + 1, data)
            return self._answer(*self._answered)
        finally:
            self._busy -= 1
            self._touch()

    def _answer(self, seq: int, data: bytes) -> web.Response:
        return web.Response(
            body=data,
            content_type=CONTENT_TYPE,
            headers={SEQ: str(seq), "Cache-Control": "no-store"},
        )


async def _first(*events: asyncio.Event, within: float) -> None:
    """Wait until any of ``events`` is set, or ``within`` seconds passed."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _too_large(request: web.Request, limit: int, what: str) -> web.Response:
    """``413``, written now, then the HTTP connection closes. A body announced as at
    most :data:`DRAIN` bytes is read and dropped first (for :data:`DRAIN_S` at most), so
    that its client, still sending it, gets the answer rather than a reset; a larger
    one is not read at all (aiohttp would read and drop it for a while)."""
    response = _error(413, f"a body of at most {limit} bytes{what}")
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    length = request.content_length
    if length is not None and length <= DRAIN:
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(DRAIN_S):
                while await request.content.readany():
                    pass
    if request.transport is not None:
        request.transport.close()
    return response


def _error(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", headers={"Cache-Control": "no-store"})


class Tunnels:
    """The open sessions and the ``/chute`` request handlers."""

    def __init__(self, server: ServerHost, origins: OriginPolicy) -> None:
        self.server = server
        self.origins = origins
        config = server.config
        self.poll_timeout = config.http.poll_ms / 1000
        self.session_timeout = config.http.session_timeout_ms / 1000
        self.sessions: dict[str, TunnelSession] = {}

    def forget(self, session: TunnelSession) -> None:
        self.sessions.pop(session.sid, None)

    def close(self) -> None:
        """End every session (the broker stops)."""
        for session in list(self.sessions.values()):
            session.end(flush=False)

    async def open(self, request: web.Request) -> web.Response:
        refused = self._refused(request, post=True)
        if refused is not None:
            return refused
        peer = peer_of(request)
        host = peer.rsplit(":", 1)[0]
        admitted = self.server.limits.admit("http-tunnel", host, peer)
        if isinstance(admitted, tuple):
            code, reason = admitted
            return _error(503, f"{reason} ({code})")
        sid = secrets.token_urlsafe(24)
        conn = NativeConnection(self.server)
        conn.protocol_name = "native/HTTP"
        session = TunnelSession(self, sid, conn, admitted)
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        peername = request.transport.get_extra_info("peername") if request.transport else None
        transport = TunnelTransport(session, {"peername": peername, "ssl_object": ssl_object})
        admitted.attach(transport)
        self.sessions[sid] = session
        conn.connection_made(transport)
        via = request.headers.get("Via")
        log.info(
            "native over HTTP: session opened from %s%s",
            peer,
            f" via {via}" if via else "",
        )
        return web.json_response(
            {"session": sid, "poll_ms": round(self.poll_timeout * 1000)},
            status=201,
            headers={"Cache-Control": "no-store"},
        )

    async def post(self, request: web.Request) -> web.Response:
        session = self._found(request, post=True)
        if isinstance(session, web.Response):
            return session
        try:
            seq = int(request.headers.get(SEQ, ""))
        except ValueError:
            return _error(400, f"a {SEQ} header (1, 2, 3, ...) is required")
        limit, what = self._body_limit(session)
        if request.content_length is not None and request.content_length > limit:
            return await _too_large(request, limit, what)

        conn = session.conn
        partial = self.server.limits.partial

        def held(size: int) -> None:
            """The body read so far counts as the connection's input in progress."""
            if conn.core is not None and not conn.closing:
                partial.update(conn, conn.core.login, conn.unfinished() + size, None)

        async def body() -> bytes | web.Response:
            parts: list[bytes] = []
            size = 0
            try:
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > limit:
                        held(0)
                        return await _too_large(request, limit, what)
                    parts.append(chunk)
                    held(size)
                    if conn.closing:  # a bound on input in progress closed it
                        return _error(410, "the session has ended")
            except ConnectionError:  # the client (or a proxy) gave up: nothing of it is fed
                held(0)
                log.debug("native over HTTP: a POST from %s was cut off", request.remote)
                return _error(400, "the body did not arrive whole")
            return b"".join(parts)

        return await session.post(seq, body)

    def _body_limit(self, session: TunnelSession) -> tuple[int, str]:
        """The largest POST body ``session`` may send now, and what to add to a refusal.

        Until its connection logged in, a session sends its login: a body holds at most
        the login budget (``max_login_frame_size`` and a little), as a socket's bytes
        before login do (:class:`~chute.server.limits.Ticket`); refused from its
        ``Content-Length``, or as it comes, before the broker holds more of it."""
        if session.ticket.authenticated:
            return body_limit(self.server.config.limits.max_packet_size), ""
        return self.server.limits.login_budget, " before login (server.max_login_frame_size)"

    async def poll(self, request: web.Request) -> web.StreamResponse:
        session = self._found(request, post=False)
        if isinstance(session, web.Response):
            return session
        try:
            ack = int(request.query.get("ack", "0"))
        except ValueError:
            return _error(400, "ack must be the Chute-Seq of the last answer (0 at first)")
        return await session.poll(ack)

    async def delete(self, request: web.Request) -> web.Response:
        refused = self._refused(request, post=False)
        if refused is not None:
            return refused
        session = self._session(request)
        if session is not None:
            session.end(flush=False)
        return web.Response(status=204)

    def _session(self, request: web.Request) -> TunnelSession | None:
        session = self.sessions.get(request.match_info["sid"])
        if session is None or session.ended:
            return None
        return session

    def _found(self, request: web.Request, *, post: bool) -> TunnelSession | web.Response:
        """The session a POST or poll names, or the answer refusing the request."""
        refused = self._refused(request, post=post)
        if refused is not None:
            return refused
        session = self._session(request)
        if session is None:
            if post:
                return _error(404, "no such session: open one with POST /chute")
            return _error(410, "no such session (it ended, or never was)")
        self._carried(request, session)
        return session

    def _carried(self, request: web.Request, session: TunnelSession) -> None:
        """Once its session logged in, the HTTP connection carrying a request is as
        logged in too: its login deadline and byte budget no longer apply (a poll is
        held for ``http_poll_ms``, and a POST carries packets of any size)."""
        if request.transport is None or not session.ticket.authenticated:
            return
        carrier = self.server.limits.ticket_of(request.transport)
        if carrier is not None:
            carrier.logged_in()

    def _refused(self, request: web.Request, *, post: bool) -> web.Response | None:
        refused = refused_origin(self.origins, request, "native over HTTP")
        if refused is not None:
            return refused
        if post and request.content_type != CONTENT_TYPE:
            return _error(415, f"send packets as Content-Type: {CONTENT_TYPE}")
        return None
