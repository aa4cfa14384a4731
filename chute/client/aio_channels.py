"""The asyncio client's ways to the broker besides a socket: a WebSocket, plain requests.

:class:`~chute.client.aio_link.AsyncLink` is an ``asyncio.Protocol``; over TCP
and TLS the loop's own transport drives it. For ``ws://``/``wss://`` and
``http://``/``https://`` URLs these transports drive it the same way, through
aiohttp's client (which also goes through the proxy that ``HTTP_PROXY`` or
``HTTPS_PROXY`` name, ``NO_PROXY`` aside):

- :class:`WebSocketTransport`: binary messages on the broker's ``/chute``;
- :class:`HttpTransport`: POSTs of what the link writes, and a poll held open
  that the broker answers as soon as it has bytes for the client, numbered so
  that a request retried after a lost answer is neither fed twice nor lost
  (:mod:`chute.server.tunnel` has the exchange).

Both write from one task, in order: what the link writes while a write is on
its way goes out together in the next one. Past :data:`chute.outbox.HIGH_WATER`
queued bytes the link's ``pause_writing`` runs, as a socket's transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
from collections.abc import Awaitable
from typing import Any

import aiohttp

from chute.client.channels import (
    CHUNK,
    CONTENT_TYPE,
    RETRIES,
    SEQ,
    SUBPROTOCOL,
    failure,
    proxy_for,
    text_of,
    unanswered_polls,
)
from chute.client.url import HTTP, BrokerUrl
from chute.errors import ConnectError
from chute.outbox import Outbox

log = logging.getLogger("chute.client")


class _Transport(asyncio.Transport):
    """What both share: the queue of writes, the writer task, the end."""

    def __init__(self, session: aiohttp.ClientSession, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._session = session
        self._protocol = protocol
        self._out = Outbox(protocol)
        self._ended = False
        self._tasks: list[asyncio.Task[None]] = []

    def _start(self) -> None:
        self._protocol.connection_made(self)
        self._tasks = [
            asyncio.ensure_future(self._guard(self._write_loop())),
            asyncio.ensure_future(self._guard(self._read_loop())),
        ]

    # -- asyncio.Transport ---------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._out.put(data)

    def is_closing(self) -> bool:
        return self._out.closing

    def close(self) -> None:
        """Send what is queued, then end (the writer task does both)."""
        self._out.close()

    def abort(self) -> None:
        self._out.clear()
        self._out.close()
        self._tasks.append(asyncio.ensure_future(self._end(None)))

    def get_write_buffer_size(self) -> int:
        return self._out.queued

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    # -- the tasks ----------------------------------------------------------------------

    async def _guard(self, work: Awaitable[None]) -> None:
        error: Exception | None = None
        try:
            await work
        except asyncio.CancelledError:
            return
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            error = exc if isinstance(exc, OSError) else OSError(str(exc) or repr(exc))
        await self._end(error)

    async def _write_loop(self) -> None:
        """Send what the link writes, all that waits in one go, until closed; then end."""
        await self._out.drain(self._send, whole=True)
        await self._end(None)

    async def _end(self, error: Exception | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._out.close()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        if not (isinstance(error, OSError) and error.errno == errno.ETIMEDOUT):
            with contextlib.suppress(Exception):  # no goodbye to a broker that is gone
                await self._finish()
        with contextlib.suppress(Exception):
            await self._session.close()
        self._protocol.connection_lost(error)

    async def _send(self, data: bytes) -> None:
        raise NotImplementedError

    async def _read_loop(self) -> None:
        raise NotImplementedError

    async def _finish(self) -> None:
        """Tell the broker the connection ends (best effort)."""


class WebSocketTransport(_Transport):
    """The native protocol in binary WebSocket messages (``ws://``, ``wss://``)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        ws: aiohttp.ClientWebSocketResponse,
        protocol: asyncio.Protocol,
    ) -> None:
        super().__init__(session, protocol)
        self._ws = ws

    async def _send(self, data: bytes) -> None:
        for start in range(0, len(data), CHUNK):
            await self._ws.send_bytes(data[start : start + CHUNK])

    async def _read_loop(self) -> None:
        async for message in self._ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                self._protocol.data_received(message.data)
            elif message.type is aiohttp.WSMsgType.TEXT:
                self._protocol.data_received(message.data.encode())
            else:
                break
        if self._ws.exception() is not None:
            raise OSError(f"the WebSocket failed: {self._ws.exception()}")

    async def _finish(self) -> None:
        await self._ws.close()


class HttpTransport(_Transport):
    """The native protocol over plain requests (``http://``, ``https://``)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        protocol: asyncio.Protocol,
        *,
        target: BrokerUrl,
        sid: str,
        context: ssl.SSLContext | bool,
        poll_limit: float,
    ) -> None:
        super().__init__(session, protocol)
        self._url = target.http_url(f"/{sid}")
        self._ssl = context
        self._seq = 0
        self._ack = 0
        self._poll_limit = aiohttp.ClientTimeout(total=None, sock_read=poll_limit)
        """The broker answers a poll within its ``poll_ms``: no answer by this (that and
        the connect timeout) means the broker, or the way to it, is gone."""

    async def _request(
        self,
        method: str,
        url: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        limits: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request and its answer; tried again if the wire failed or the answer is
        late (every request here may be repeated)."""
        sent = {"Content-Type": CONTENT_TYPE, **(headers or {})}
        for attempt in range(RETRIES + 1):
            try:
                async with self._session.request(
                    method, url, data=body, headers=sent, ssl=self._ssl, timeout=limits
                ) as answer:
                    return answer.status, dict(answer.headers), await answer.read()
            except (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError):
                if self._ended or attempt == RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, data: bytes) -> None:
        for start in range(0, len(data), CHUNK):
            self._seq += 1
            status, _, body = await self._request(
                "POST", self._url, data[start : start + CHUNK], {SEQ: str(self._seq)}
            )
            if status != 204:
                raise OSError(f"the broker ended the session: {text_of(body)}")

    async def _read_loop(self) -> None:
        while True:
            try:
                status, headers, body = await self._request(
                    "GET", f"{self._url}?ack={self._ack}", limits=self._poll_limit
                )
            except aiohttp.ServerTimeoutError:
                raise unanswered_polls(self._poll_limit.sock_read or 0.0) from None
            if status == 200:
                seq = int(headers.get(SEQ, "0"))
                if seq == self._ack + 1:
                    self._ack = seq
                    if body:
                        self._protocol.data_received(body)
            elif status in (404, 410):
                return  # the session ended
            elif status != 204:
                raise OSError(f"the broker answered a poll {status}: {text_of(body)}")

    async def _finish(self) -> None:
        async with asyncio.timeout(5):
            async with self._session.delete(self._url, ssl=self._ssl):
                pass


def _failure(target: BrokerUrl, exc: BaseException) -> ConnectError:
    """A failed connection, as the person connecting can act on it (as the blocking
    client says it: :func:`chute.client.channels.failure`)."""
    tls_error = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None)
    if isinstance(tls_error, ssl.SSLError):
        return failure(target, tls_error)
    unanswered = isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.WSServerHandshakeError)
    return failure(target, exc, unanswered=unanswered)


async def open_transport(
    target: BrokerUrl, protocol: asyncio.Protocol, limit: float, context: ssl.SSLContext | None
) -> None:
    """Connect ``protocol`` to ``target`` over a WebSocket or plain requests.

    Raises:
        ConnectError: the broker cannot be reached, or refused.
    """
    session = aiohttp.ClientSession(
        trust_env=True,  # HTTP_PROXY, HTTPS_PROXY, NO_PROXY
        timeout=aiohttp.ClientTimeout(total=None, connect=limit, sock_connect=limit),
    )
    tls: ssl.SSLContext | bool = context if context is not None else True
    try:
        if target.transport == HTTP:
            async with session.post(
                target.http_url(), headers={"Content-Type": CONTENT_TYPE}, ssl=tls
            ) as answer:
                body = await answer.read()
                if answer.status != 201:
                    raise ConnectError(
                        f"{target} refused a session: {answer.status} {text_of(body)}"
                    )
                try:
                    opened = await answer.json()
                    sid = str(opened["session"])
                    poll = float(opened["poll_ms"]) / 1000
                except (ValueError, KeyError, TypeError, aiohttp.ContentTypeError):
                    raise ConnectError(f"{target} is not a chute broker") from None
            transport: _Transport = HttpTransport(
                session, protocol, target=target, sid=sid, context=tls, poll_limit=poll + limit
            )
        else:
            proxy = proxy_for(target)  # aiohttp's trust_env leaves ws:// URLs out
            ws = await session.ws_connect(
                target.http_url(),
                proxy=None if proxy is None else f"http://{proxy[0]}:{proxy[1]}",
                protocols=(SUBPROTOCOL,),
                ssl=tls,
                max_msg_size=0,
                compress=0,
                autoping=True,
            )
            transport = WebSocketTransport(session, ws, protocol)
    except ConnectError:
        await session.close()
        raise
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        await session.close()
        raise _failure(target, exc) from None
    transport._start()
