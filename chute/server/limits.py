"""Who may connect, and for how long without logging in: the broker's connection limits.

Every connection any listener accepts (native, STOMP, HTTP/WebSocket, with or
without TLS, and the Simple-message-queue listeners) passes here first, in
:meth:`ConnectionLimits.admit`, before a transport or a protocol is made for it:

- ``max_connections`` caps the connections open at once, ``max_connections_per_host``
  those of one client address. Over a limit, the listener writes its protocol's
  refusal (where it can speak before a handshake) and closes the socket.
- A connection that has not logged in within ``login_timeout_ms`` of its accept
  (the TLS handshake, an HTTP upgrade and the protocol's login all count) is
  closed: its driver, if it has one yet, tells the client why in its protocol
  (:class:`LoginDriver`); otherwise the socket is just closed.
- Before login, the HTTP listener reads at most a small budget of bytes from a
  client (what an upgrade request and a CONNECT need), then stops reading it
  until it logs in (or its deadline closes it): aiohttp would otherwise buffer
  a WebSocket message of up to ``max_packet_size`` for anyone. A client that
  sends its next frames before its login is answered just waits. The native
  and STOMP drivers need no budget: their codecs refuse a large frame from its
  header until login (``max_login_frame_size``).

Each accepted connection gets a :class:`Ticket`, which the listener's front
protocol (:mod:`chute.server.accept`) releases when the connection is lost. The
counts are the broker's ``sockets`` statistics (:meth:`ConnectionLimits.stats`).

Logs: a condition a flood repeats (a limit refusing, the login deadline, the
file descriptors running out, protocol errors before login, HTTP's malformed
requests among them, a TLS handshake on a plain port) is an :class:`Episode`: one WARNING when it
begins, DEBUG for each case after, and one line summing it up once it has not
happened for :data:`~chute.server.episode.QUIET` seconds. A hostile client therefore costs a line or
two, never a line per connection.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Final, Protocol, cast

from chute.config import LimitSettings
from chute.server.episode import Episode
from chute.server.partial import PartialFrames

log = logging.getLogger("chute.server")

GRACE: Final = 1.0
"""Seconds a connection closed for its login deadline has to go before it is aborted."""
LOGIN_ALLOWANCE: Final = 16 << 10
"""What an HTTP connection may send before login besides one login frame: its upgrade."""


class LoginDriver(Protocol):
    """What a protocol driver does for its connection's :class:`Ticket`."""

    def close_with_error(self, code: str, reason: str) -> None:
        """Tell the client ``reason`` in its protocol's error (``code``), then close."""


class Ticket:
    """One accepted connection, from its accept to its loss: what the limits count.

    The listener's front protocol :meth:`attach` es the transport its protocol
    sees and :meth:`release` s the ticket when the connection is lost; the
    driver, once it has one, says :meth:`logged_in`.
    """

    __slots__ = (
        "_deadline",
        "authenticated",
        "budget",
        "driver",
        "expired",
        "held",
        "host",
        "limits",
        "listener",
        "peer",
        "released",
        "stage",
        "transport",
        "visible",
    )

    def __init__(
        self, limits: ConnectionLimits, listener: str, host: str, peer: str, budget: int | None
    ) -> None:
        self.limits = limits
        self.listener = listener
        self.host = host
        self.peer = peer
        self.budget = budget
        """Bytes the client may still send before it logs in (None: no budget)."""
        self.authenticated = False
        self.expired = False  # closed for its login deadline
        self.held = False  # reading paused: the budget is spent and no login yet
        self.released = False
        self.stage = "connected"
        """How far the connection got before its login, for the log line of one that
        never logs in (set by the fronts and the HTTP endpoints as it goes)."""
        self.driver: LoginDriver | None = None
        self.transport: asyncio.Transport | None = None  # the socket's own
        self.visible: asyncio.BaseTransport | None = None  # what the protocol sees (TLS's)
        self._deadline: asyncio.TimerHandle | None = None

    def attach(self, transport: asyncio.BaseTransport) -> None:
        """``transport`` is the socket's (the first call) or the TLS one over it (a
        later one): a driver finds this ticket by the one it is given."""
        if self.transport is None:
            self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if self.visible is not None:
            self.limits._by_transport.pop(self.visible, None)
        self.visible = transport
        if not self.released:
            self.limits._by_transport[transport] = self

    def logged_in(self) -> None:
        """The client logged in: the login deadline and budget no longer apply (reading
        resumes if the budget had stopped it)."""
        if self.authenticated or self.released:
            return
        self.authenticated = True
        self.budget = None
        self.limits._logged_in(self)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self.held:
            self.held = False
            if self.visible is not None and not self.visible.is_closing():
                cast(asyncio.Transport, self.visible).resume_reading()

    def received(self, size: int) -> None:
        """``size`` more bytes read before login (they go on to the protocol): past the
        budget, reading stops until the client logs in."""
        if self.budget is None:
            return
        self.budget -= size
        if self.budget < 0 and not self.held and self.visible is not None:
            self.held = True
            self.limits.counts["held_before_login"] += 1
            log.debug(
                "%s on %s sent over %d bytes before logging in: not read until it does",
                self.peer,
                self.listener,
                self.limits.login_budget,
            )
            cast(asyncio.Transport, self.visible).pause_reading()

    def release(self) -> None:
        """The connection is gone (idempotent)."""
        if self.released:
            return
        self.released = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.limits._release(self)

    def close(self, code: str, reason: str) -> None:
        """Close the connection, told in its protocol if a driver has it; abort it if it
        is still open :data:`GRACE` seconds later."""
        if self.released:
            return
        if self.driver is not None:
            self.driver.close_with_error(code, reason)
        elif self.transport is not None:
            self.transport.abort()
        if not self.released:
            self._deadline = asyncio.get_running_loop().call_later(GRACE, self._abort)

    def _abort(self) -> None:
        self._deadline = None
        if not self.released and self.transport is not None:
            self.transport.abort()

    def _expire(self) -> None:
        self._deadline = None
        if self.authenticated or self.released:
            return
        self.expired = True
        self.limits._expired(self)


class ConnectionLimits:
    """The limits, and the count of connections open; see the module docstring."""

    def __init__(self, limits: LimitSettings) -> None:
        self.max_connections = limits.max_connections
        self.max_per_host = limits.max_connections_per_host
        self.login_timeout = limits.login_timeout_ms / 1000
        self.login_budget = limits.login_frame_size + LOGIN_ALLOWANCE
        self.open = 0
        self.before_login = 0
        self.by_listener: Counter[str] = Counter()
        self.by_host: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # refusals and closings, for stats()
        self._by_transport: dict[asyncio.BaseTransport, Ticket] = {}
        self.full = Episode("connections refused by server.max_connections")
        self.host_full = Episode("connections refused by server.max_connections_per_host")
        self.late = Episode("connections closed by server.login_timeout_ms")
        self.unruly = Episode("connections closed for breaking the protocol before login")
        self.tls_on_plain: dict[str, Episode] = {}  # by listener
        self.idle = Episode("connections closed by server.idle_timeout_ms")
        self.no_descriptors = Episode("accepts that found no file descriptor free")
        self.partial = PartialFrames(limits)  # frames begun after login and not finished

    # -- the listeners' side ------------------------------------------------------------

    def admit(
        self, listener: str, host: str, peer: str, *, budget: bool = False
    ) -> Ticket | tuple[str, str]:
        """A ticket for a connection just accepted from ``host`` (``peer`` is host:port),
        or the refusal ``(code, reason)`` naming the limit it is over. ``budget``: the
        client may send only :attr:`login_budget` bytes before it logs in."""
        if self.max_connections and self.open >= self.max_connections:
            self.counts["refused_max_connections"] += 1
            self.full.hit(
                "connection limit reached: %d connections open (server.max_connections = %d); "
                "refusing new ones until some close",
                self.open,
                self.max_connections,
            )
            return (
                "connection-limit",
                f"the broker has {self.max_connections} connections open, its limit "
                "(server.max_connections): try again later",
            )
        if self.max_per_host and self.by_host[host] >= self.max_per_host:
            self.counts["refused_max_connections_per_host"] += 1
            self.host_full.hit(
                "connection limit reached for %s: %d connections open "
                "(server.max_connections_per_host = %d); refusing its new ones until some close",
                host,
                self.by_host[host],
                self.max_per_host,
            )
            return (
                "connection-limit",
                f"{host} has {self.max_per_host} connections open to this broker, the "
                "limit per client address (server.max_connections_per_host): close some",
            )
        ticket = Ticket(self, listener, host, peer, self.login_budget if budget else None)
        self.open += 1
        self.before_login += 1
        self.by_listener[listener] += 1
        self.by_host[host] += 1
        if self.login_timeout:
            ticket._deadline = asyncio.get_running_loop().call_later(
                self.login_timeout, ticket._expire
            )
        return ticket

    def ticket_of(self, transport: asyncio.BaseTransport) -> Ticket | None:
        """The ticket of the connection whose protocol was given ``transport``."""
        return self._by_transport.get(transport)

    def out_of_descriptors(self, listener: str, error: OSError, limit: int) -> None:
        """An accept on ``listener`` failed for want of a file descriptor."""
        self.counts["accept_failures"] += 1
        self.no_descriptors.hit(
            "out of file descriptors: %s cannot accept (%s); clients wait until connections "
            "close. Raise the open-file limit (now %d: ulimit -n, systemd LimitNOFILE=) or "
            "lower server.max_connections",
            listener,
            error.strerror or error,
            limit,
        )

    # -- the drivers' side --------------------------------------------------------------

    def error_before_login(self, peer: str, protocol: str, reason: str, code: str) -> None:
        """A client that had not logged in broke its protocol (its driver closes it)."""
        self.counts["protocol_errors_before_login"] += 1
        self.unruly.hit(
            "%s client %s broke the protocol before logging in: %s (%s); closing",
            protocol,
            peer,
            reason,
            code,
        )

    def tls_on_plain_port(self, listener: str, peer: str) -> None:
        """A client began a TLS handshake on a plain listener (its front closes it)."""
        self.counts["tls_on_plain_port"] += 1
        episode = self.tls_on_plain.get(listener)
        if episode is None:
            episode = self.tls_on_plain[listener] = Episode(
                f"{listener}: connections closed for a TLS handshake on this plain port"
            )
        episode.hit(
            "%s: %s began a TLS handshake on this plain port; closing "
            "(a TLS client must connect to the TLS port)",
            listener,
            peer,
        )

    def idle_closed(self, peer: str, protocol: str, seconds: float) -> None:
        """A logged-in connection that negotiated no heart-beats was idle too long."""
        self.counts["idle_timeouts"] += 1
        self.idle.hit(
            "%s client %s sent and received nothing for %.1f s (server.idle_timeout_ms); closing",
            protocol,
            peer,
            seconds,
        )

    # -- tickets --------------------------------------------------------------------------

    def _logged_in(self, ticket: Ticket) -> None:
        self.before_login -= 1

    def _release(self, ticket: Ticket) -> None:
        self.open -= 1
        if not ticket.authenticated:
            self.before_login -= 1
        self._forget(self.by_listener, ticket.listener)
        self._forget(self.by_host, ticket.host)
        if ticket.visible is not None:
            self._by_transport.pop(ticket.visible, None)

    @staticmethod
    def _forget(counter: Counter[str], key: str) -> None:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]

    def _expired(self, ticket: Ticket) -> None:
        self.counts["login_timeouts"] += 1
        self.late.hit(
            "closing connections that do not log in within %g s (server.login_timeout_ms): "
            "%s on %s (%s)",
            self.login_timeout,
            ticket.peer,
            ticket.listener,
            ticket.stage,
        )
        ticket.close(
            "login-timeout",
            f"no login within {self.login_timeout:g} s of connecting (server.login_timeout_ms)",
        )

    # -- what `chute stat` shows -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The connections accepted and open now, by listener, and what the limits did."""
        names = (
            "refused_max_connections",
            "refused_max_connections_per_host",
            "login_timeouts",
            "held_before_login",
            "protocol_errors_before_login",
            "tls_on_plain_port",
            "idle_timeouts",
            "accept_failures",
        )
        return {
            "open": self.open,
            "before_login": self.before_login,
            "by_listener": dict(sorted(self.by_listener.items())),
            **{name: self.counts[name] for name in names},
            **self.partial.stats(),
        }

    def close(self) -> None:
        """The broker stops: no episode is summed up after it."""
        self.partial.close()
        for episode in (
            self.full,
            self.host_full,
            self.late,
            self.unruly,
            self.idle,
            self.no_descriptors,
            *self.tls_on_plain.values(),
        ):
            episode.cancel()
