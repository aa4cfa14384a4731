"""The broker's listening sockets, and the one accept loop every listener shares.

Why not ``loop.create_server``: it accepts out of the broker's sight, and what
it does when the process is out of file descriptors (``EMFILE``, ``ENFILE``)
is wrong for a broker. uvloop (libuv) then accepts every waiting connection
with a descriptor it keeps in reserve and closes it at once, telling no one;
when even that fails, uvloop closes the listening socket for good. asyncio
logs an error for every attempt, once a second. So a :class:`Listener` accepts
itself (``loop.add_reader`` on the listening socket, ``socket.accept``), which
lets it:

- ask :class:`~chute.server.limits.ConnectionLimits` about each connection before
  anything is made for it, and refuse one over a limit cheaply: the listener's
  ``refusal`` bytes (its protocol's error, where the protocol may speak before a
  handshake) once the client spoke (:mod:`chute.refuse`), then close; past
  :data:`REFUSING` connections being answered so, at once;
- survive running out of descriptors: stop accepting for :data:`RETRY` seconds
  (the clients wait in the kernel's backlog), say so once per episode, and go on
  once descriptors are free again (as trio does);
- hand each connection to the event loop (``loop.connect_accepted_socket``) with
  the listener's front protocol (:mod:`chute.server.accept`) and its ticket.

:func:`raise_open_file_limit` raises the soft open-file limit to the hard one
at start, as most servers do, and warns when it stays below what
``max_connections`` needs.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
from collections.abc import Callable
from typing import Any, Final

from chute.refuse import refuse
from chute.server.accept import Front
from chute.server.limits import ConnectionLimits, Ticket

log = logging.getLogger("chute.server")

Refusal = Callable[[str, str], bytes]
"""A protocol's refusal before any handshake: ``(code, reason)`` to its bytes."""

BACKLOG: Final = 512
ACCEPT_BATCH: Final = 64  # accepts per wake-up: other work gets its turn in a flood
RETRY: Final = 0.1  # seconds without accepting once descriptors ran out
REFUSING: Final = 16  # refused connections answered after their first bytes, at once
REFUSE_WAIT: Final = 1.0  # seconds a refused client may take to speak before it is answered
FD_RESERVE: Final = 100  # descriptors besides connections: journal, listeners, logs
_NO_DESCRIPTOR: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_GONE: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.ECONNRESET, errno.EPERM})


def bind(host: str, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """Listening sockets for ``host:port`` (one per address the host resolves to).
    With ``reuse_port`` (``SO_REUSEPORT``) other processes of this user that ask for it
    too listen on the same port, and the kernel spreads the connections among them:
    the nodes ``chute serve --nodes`` starts share the client ports so.

    Raises:
        OSError: the address cannot be resolved or bound.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Listener(asyncio.AbstractServer):
    """One listener's sockets and their accept loop; see the module docstring.

    Args:
        name: the listener's name in logs and statistics ("native", "stomp-tls", ...).
        sockets: bound, listening, non-blocking (:func:`bind`).
        front: the protocol each connection's transport starts with.
        limits: the broker's connection limits.
        refusal: the bytes that refuse a connection over a limit, or None (TLS, or a
            protocol that cannot say why): the socket is closed without a word.
        budget: only a small budget of a client's bytes is read before it logs in (HTTP).
    """

    def __init__(
        self,
        name: str,
        sockets: list[socket.socket],
        front: Front,
        limits: ConnectionLimits,
        *,
        refusal: Refusal | None = None,
        budget: bool = False,
    ) -> None:
        self.name = name
        self.sockets = sockets
        self.front = front
        self.limits = limits
        self.refusal = refusal
        self.budget = budget
        self.loop = asyncio.get_running_loop()
        self._handing: set[asyncio.Task[Any]] = set()  # connect_accepted_socket under way
        self._refusing: set[asyncio.Task[None]] = set()  # refused, answered once they speak
        self._retry: asyncio.TimerHandle | None = None
        self._serving = False
        self._closed = False

    # -- asyncio.AbstractServer ------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_reading()
        if self._retry is not None:
            self._retry.cancel()
        for sock in self.sockets:
            sock.close()
        for task in [*self._handing, *self._refusing]:
            task.cancel()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self.start()

    async def serve_forever(self) -> None:
        self.start()
        await asyncio.Future()  # until cancelled

    async def wait_closed(self) -> None:
        return None  # the sockets close in close(); connections are the broker's business

    def start(self) -> None:
        """Accept from now on."""
        if self._serving or self._closed:
            return
        self._serving = True
        for sock in self.sockets:
            self.loop.add_reader(sock.fileno(), self._ready, sock)

    def _stop_reading(self) -> None:
        if self._serving:
            self._serving = False
            for sock in self.sockets:
                with contextlib.suppress(OSError, ValueError):
                    self.loop.remove_reader(sock.fileno())

    # -- accepting ------------------------------------------------------------------------

    def _ready(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _GONE:
                    continue  # the client left before we took it
                if exc.errno in _NO_DESCRIPTOR:
                    self.limits.out_of_descriptors(self.name, exc, open_file_limit())
                else:
                    log.error("%s: accept failed: %s; retrying", self.name, exc)
                self._pause()
                return
            self._accepted(conn, address)

    def _pause(self) -> None:
        """Stop accepting for :data:`RETRY` seconds (connections wait in the backlog)."""
        self._stop_reading()
        if not self._closed:
            self._retry = self.loop.call_later(RETRY, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self.start()

    def _accepted(self, conn: socket.socket, address: Any) -> None:
        conn.setblocking(False)
        host = str(address[0]) if isinstance(address, tuple) else str(address)
        peer = f"{host}:{address[1]}" if isinstance(address, tuple) else host
        admitted = self.limits.admit(self.name, host, peer, budget=self.budget)
        if not isinstance(admitted, Ticket):
            self._refuse(conn, *admitted)
            return
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        front = self.front
        task = self.loop.create_task(
            self.loop.connect_accepted_socket(lambda: front(admitted), conn)
        )
        self._handing.add(task)
        task.add_done_callback(lambda done: self._handed(done, conn, admitted))

    def _handed(self, task: asyncio.Task[Any], conn: socket.socket, ticket: Ticket) -> None:
        self._handing.discard(task)
        if task.cancelled():  # the listener closed before the loop took the socket
            conn.close()
            ticket.release()
            return
        exc = task.exception()
        if exc is not None:  # the loop's transport reports its own loss, if it was made
            log.debug("%s: connection from %s not taken: %s", self.name, ticket.peer, exc)
            ticket.release()

    def _refuse(self, conn: socket.socket, code: str, reason: str) -> None:
        """Say why (if the protocol can before a handshake) and close; never blocks."""
        if self.refusal is not None and len(self._refusing) < REFUSING:
            task = self.loop.create_task(self._answer(conn, self.refusal(code, reason)))
            self._refusing.add(task)
            task.add_done_callback(self._refusing.discard)
            return
        try:
            if self.refusal is not None:
                conn.send(self.refusal(code, reason))
                conn.shutdown(socket.SHUT_WR)
            conn.recv(4096)  # what the client sent already: closing over it would reset
        except OSError:
            pass
        finally:
            conn.close()

    async def _answer(self, conn: socket.socket, refusal: bytes) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
        except BaseException:
            conn.close()
            raise
        await refuse(reader, writer, refusal, REFUSE_WAIT)


def open_file_limit() -> int:
    """The process's soft limit on open files (-1: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return -1 if soft == resource.RLIM_INFINITY else soft


def raise_open_file_limit(max_connections: int) -> None:
    """Raise the soft open-file limit to the hard one; warn if it stays below what
    ``max_connections`` connections need (one descriptor each, plus a reserve)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError) as exc:
            log.debug("cannot raise the open-file limit from %d to %d: %s", soft, wanted, exc)
        else:
            log.debug("open-file limit raised from %d to %d", soft, wanted)
    limit = open_file_limit()
    need = max_connections + FD_RESERVE
    if max_connections and 0 <= limit < need:
        log.warning(
            "the open-file limit is %d (ulimit -n), below the %d or so that "
            "server.max_connections = %d needs: past about %d connections, new clients "
            "wait for a free descriptor. Raise the limit (ulimit -n, systemd LimitNOFILE=) "
            "or lower server.max_connections",
            limit,
            need,
            max_connections,
            max(limit - FD_RESERVE, 0),
        )
