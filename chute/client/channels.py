"""The blocking client's ways to the broker besides a socket: a WebSocket, plain requests.

:class:`~chute.client.link.Link` moves bytes through a :class:`Channel`: a
socket, a :class:`~chute.client.tls.TlsSocket`, or one of these, all alike
(``sendall`` from the writer thread, ``recv`` from the reader thread). The
packets are the same whatever carries them.

- :class:`WebSocketChannel` (``ws://``, ``wss://``): binary messages on the
  broker's ``/chute``, through the ``websockets`` library (which also goes
  through the proxy that ``HTTPS_PROXY``/``HTTP_PROXY`` name, by ``CONNECT``).
  Its TLS is :class:`~chute.client.tls.SelectableTlsSocket`, not the library's
  :class:`ssl.SSLSocket`: the library reads on a thread of its own while the
  writer thread sends, and one OpenSSL connection must not be used by two
  threads at once.
- :class:`HttpChannel` (``http://``, ``https://``): for networks where only plain
  requests pass. ``sendall`` POSTs the bytes; ``recv`` holds a poll (a GET the
  broker answers as soon as it has bytes for the client). Requests are numbered
  so that one retried after a lost answer is neither fed twice nor lost
  (:mod:`chute.server.tunnel` has the exchange). A proxy named by ``HTTP_PROXY``
  (``http://``) gets each request as a plain proxy request, no ``CONNECT``;
  for ``https://`` one named by ``HTTPS_PROXY`` is asked to ``CONNECT``.
  ``NO_PROXY`` is honoured.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import socket
import ssl
import urllib.request
from typing import Final, Protocol, cast
from urllib.parse import urlsplit

from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidHandshake,
    InvalidMessage,
)
from websockets.sync.client import ClientConnection, reconnect
from websockets.sync.utils import Deadline
from websockets.typing import Subprotocol

from chute.client.tls import SelectableTlsSocket, describe
from chute.client.url import BrokerUrl
from chute.errors import ConnectError

CONTENT_TYPE: Final = "application/x-chute"
SEQ: Final = "Chute-Seq"
SUBPROTOCOL: Final = "chute"
CHUNK: Final = 1 << 20
"""The most one POST or WebSocket message carries (a longer write goes in several, in
order): what the broker takes whatever its ``max_packet_size``."""
RETRIES: Final = 2
"""A request that failed on the wire, or whose answer is late, is tried again this many times
(every request but the one opening a session may be repeated)."""


class Channel(Protocol):
    """What :class:`~chute.client.link.Link` needs of its connection."""

    def sendall(self, data: bytes, /) -> None: ...

    def recv(self, size: int, /) -> bytes: ...

    def shutdown(self, how: int, /) -> None: ...

    def close(self) -> None: ...


def failure(
    target: BrokerUrl, exc: BaseException, what: str = "connect to", *, unanswered: bool = False
) -> ConnectError:
    """A connection to ``target`` that failed, said as the person connecting can act on it
    (``unanswered``: the broker closed it without an HTTP answer, as the library told)."""
    if isinstance(exc, ssl.SSLError):
        plain = f"{target.scheme[:-1]}://"
        return ConnectError(f"TLS handshake with {target} failed: {describe(exc, plain)}")
    hint = ""
    if not target.tls and (
        unanswered
        or isinstance(
            exc, (http.client.RemoteDisconnected, http.client.BadStatusLine, InvalidMessage)
        )
    ):
        hint = f" (no HTTP answer: if the port speaks TLS, use {target.scheme}s://)"
    reason = str(exc) or ("timed out" if isinstance(exc, TimeoutError) else repr(exc))
    return ConnectError(f"cannot {what} {target}: {reason}{hint}")


def proxy_for(target: BrokerUrl) -> tuple[str, int] | None:
    """The proxy the environment names for ``target`` (``HTTP_PROXY`` or
    ``HTTPS_PROXY``, unless ``NO_PROXY`` exempts its host), or None."""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get("https" if target.tls else "http")
    if not url or urllib.request.proxy_bypass(target.host):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or 8080


class _Connecting(reconnect):
    """``websockets``' connecting, with the TLS of :class:`SelectableTlsSocket`."""

    def enable_tls(self, sock: socket.socket, deadline: Deadline) -> socket.socket:
        context = self.ssl if self.ssl is not None else ssl.create_default_context()
        sock.settimeout(deadline.timeout())
        tls = SelectableTlsSocket(sock, context, self.server_hostname or self.ws_uri.host)
        sock.settimeout(None)
        return cast(socket.socket, tls)  # the library uses what a socket has of it


class WebSocketChannel:
    """The native protocol in binary WebSocket messages (``ws://``, ``wss://``)."""

    def __init__(self, target: BrokerUrl, timeout: float, context: ssl.SSLContext | None) -> None:
        try:
            self._ws: ClientConnection = _Connecting(
                target.http_url(),
                ssl=context,
                subprotocols=[Subprotocol(SUBPROTOCOL)],
                compression=None,
                max_size=None,
                open_timeout=timeout,
                ping_interval=None,  # the protocol's own heartbeats watch the connection
            ).connect()
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise failure(target, exc, "open a WebSocket to") from None
        self._ws.pending_legacy_warning = False  # a connection to use directly, no `with`
        self._ws.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def sendall(self, data: bytes) -> None:
        try:
            for start in range(0, len(data), CHUNK):
                self._ws.send(bytes(data[start : start + CHUNK]))
        except ConnectionClosed as exc:
            raise OSError(errno.EPIPE, f"the WebSocket is closed ({exc})") from None

    def recv(self, size: int) -> bytes:  # a message is returned whole, whatever its size
        try:
            message = self._ws.recv()
        except ConnectionClosedOK:
            return b""
        except ConnectionClosed as exc:
            raise OSError(errno.ECONNRESET, f"the WebSocket closed ({exc})") from None
        return message.encode() if isinstance(message, str) else message

    def shutdown(self, how: int) -> None:  # a WebSocket closes both ways
        self._ws.close()

    def close(self) -> None:
        self._ws.close()


class HttpChannel:
    """The native protocol over plain requests (``http://``, ``https://``)."""

    def __init__(self, target: BrokerUrl, timeout: float, context: ssl.SSLContext | None) -> None:
        self._target = target
        self._timeout = timeout
        self._context = context
        self._proxy = proxy_for(target)
        self._closed = False
        self._seq = 0  # of the last POST
        self._ack = 0  # Chute-Seq of the last poll answer taken
        self._post = self._connection(timeout)
        status, _, body = self._exchange(self._post, "POST", "", b"", retry=False)
        if status != 201:
            raise ConnectError(f"{target} refused a session: {status} {text_of(body)}")
        try:
            opened = json.loads(body)
            self._sid = str(opened["session"])
            poll = float(opened["poll_ms"]) / 1000
        except (ValueError, KeyError, TypeError):
            raise ConnectError(
                f"{target} is not a chute broker (its answer: {text_of(body)})"
            ) from None
        self._poll = self._connection(poll + timeout)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        target, proxy = self._target, self._proxy
        if proxy is None:
            if target.tls:
                return http.client.HTTPSConnection(
                    target.host, target.port, timeout=timeout, context=self._context
                )
            return http.client.HTTPConnection(target.host, target.port, timeout=timeout)
        if target.tls:  # end to end: the proxy is asked to CONNECT
            conn = http.client.HTTPSConnection(
                proxy[0], proxy[1], timeout=timeout, context=self._context
            )
            conn.set_tunnel(target.host, target.port)
            return conn
        return http.client.HTTPConnection(proxy[0], proxy[1], timeout=timeout)

    def _path(self, suffix: str) -> str:
        if self._proxy is not None and not self._target.tls:
            return self._target.http_url(suffix)  # a proxy request names the whole URL
        return self._target.path + suffix

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        suffix: str,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        retry: bool = True,
        held: bool = False,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request and its whole answer; tried again on a fresh connection if the
        wire failed (only for requests that may be repeated). ``held``: the answer may
        take as long as the broker needs (a POST waits while the broker does not read,
        as a socket's send would), the timeout is for connecting and sending.

        Raises:
            OSError: the broker cannot be reached.
        """
        sent = {"Content-Type": CONTENT_TYPE, **(headers or {})}
        for attempt in range(RETRIES + 1 if retry else 1):
            try:
                if conn.sock is not None:  # a kept-alive connection a held answer left unbounded
                    conn.sock.settimeout(conn.timeout)
                conn.request(method, self._path(suffix), body=body, headers=sent)
                if held and conn.sock is not None:
                    conn.sock.settimeout(None)
                answer = conn.getresponse()
                return answer.status, answer.headers, answer.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if self._closed or attempt == (RETRIES if retry else 0):
                    if isinstance(exc, OSError):
                        raise
                    raise OSError(errno.ECONNRESET, f"{self._target}: {exc!r}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def sendall(self, data: bytes) -> None:
        for start in range(0, len(data), CHUNK):
            self._seq += 1
            status, _, body = self._exchange(
                self._post,
                "POST",
                f"/{self._sid}",
                bytes(data[start : start + CHUNK]),
                headers={SEQ: str(self._seq)},
                held=True,
            )
            if status != 204:
                raise OSError(errno.ECONNRESET, f"the broker ended the session: {text_of(body)}")

    def recv(self, size: int) -> bytes:  # an answer is returned whole
        while not self._closed:
            try:
                status, headers, body = self._exchange(
                    self._poll, "GET", f"/{self._sid}?ack={self._ack}", b""
                )
            except TimeoutError:
                raise unanswered_polls(self._poll.timeout or 0.0) from None
            if status == 200:
                seq = int(headers.get(SEQ, "0"))
                if seq == self._ack + 1:
                    self._ack = seq
                    if body:
                        return body
                continue
            if status == 204:
                continue
            if status in (404, 410):
                return b""  # the session ended: the end of the stream
            raise OSError(errno.ECONNRESET, f"the broker answered a poll {status}: {text_of(body)}")
        return b""

    def shutdown(self, how: int) -> None:  # the session ends both ways
        """End the session (the broker answers the poll held: :meth:`recv` returns)."""
        if self._closed:
            return
        conn = self._connection(min(self._timeout, 5.0))
        with contextlib.suppress(OSError, http.client.HTTPException):
            self._exchange(conn, "DELETE", f"/{self._sid}", b"", retry=False)
        conn.close()
        self._closed = True
        for held in (self._poll, self._post):  # a broker that did not answer: they end here
            sock = held.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._post.close()
        self._poll.close()


def unanswered_polls(limit: float) -> OSError:
    """The error when the broker, which answers every poll within its ``poll_ms``, left
    one unanswered for ``limit`` seconds every time it was tried."""
    return OSError(
        errno.ETIMEDOUT,
        f"the broker answered no poll in {limit:g} s ({RETRIES + 1} tries): "
        "it, or the way to it, is gone",
    )


def text_of(body: bytes) -> str:
    """An error answer's body, to quote."""
    return body.decode("utf-8", "replace").strip()[:200]
