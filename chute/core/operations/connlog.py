"""Connect and disconnect log lines that do not flood the log when clients reconnect.

Some clients connect again and again: the Spark connector opens connections for
each micro-batch (every few seconds), a script may run once a second. Two INFO
lines each time would bury everything else, so:

- A connection is logged at INFO when it connects and when it disconnects, unless
  it is a *reconnection*: a client of the same kind (protocol, user, client
  address without its port, client id) disconnected less than ``quiet_s`` ago.
  A reconnection's two lines are logged at DEBUG.
- Reconnections are counted per kind, and once per ``summary_s`` (at the next
  connect or disconnect of any client) one INFO line says how many there were::

      native client from 127.0.0.1 (user=spark, client_id=None): 120 reconnection(s)
      in the last 60 s (their connect and disconnect lines are at DEBUG)

- After ``quiet_s`` without one of its connections closing, a kind's next
  connection is logged at INFO again.

:data:`CONNECTIONS` is the one the broker's connect path and its transports use.
Pure: no I/O but the log lines; the clock is injectable for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from chute.core.rules.access import peer_host

__all__ = ["CONNECTIONS", "ConnectionLog"]

QUIET_S: Final = 60.0
SUMMARY_S: Final = 60.0
MAX_TRACKED: Final = 100_000  # connections whose disconnect level is kept; past it, the oldest

_Kind = tuple[str, str, str, str | None]  # protocol, user, client host, client id


@dataclass(slots=True)
class _KindState:
    open: int = 0  # its connections open now
    last_close: float | None = None
    reconnections: int = 0  # logged at DEBUG since `since`
    since: float = 0.0


class ConnectionLog:
    """Decides the level of each connect and disconnect line and writes it.

    Used from one thread (the broker's loop).
    """

    def __init__(
        self,
        *,
        quiet_s: float = QUIET_S,
        summary_s: float = SUMMARY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quiet_s = quiet_s
        self.summary_s = summary_s
        self._clock = clock
        self._kinds: dict[_Kind, _KindState] = {}
        self._connections: dict[str, tuple[_Kind, int]] = {}  # id -> its kind, its level
        self._last_sweep = clock()

    def connected(
        self,
        log: logging.Logger,
        connection_id: str,
        *,
        protocol: str,
        peer: str,
        user: str,
        client_id: str | None,
    ) -> None:
        """Log that ``connection_id`` connected (INFO, or DEBUG for a reconnection)."""
        now = self._clock()
        self._sweep(log, now)
        kind: _Kind = (protocol, user, peer_host(peer) or "?", client_id)
        state = self._kinds.get(kind)
        if state is None:
            state = self._kinds[kind] = _KindState(since=now)
        reconnection = state.last_close is not None and now - state.last_close < self.quiet_s
        level = logging.DEBUG if reconnection else logging.INFO
        if reconnection:
            state.reconnections += 1
        else:
            self._summarize(log, kind, state, now)  # what came before the quiet time
        state.open += 1
        self._connections[connection_id] = (kind, level)
        if len(self._connections) > MAX_TRACKED:  # one never reported closed: forget it
            self._connections.pop(next(iter(self._connections)))
        log.log(
            level,
            "%s client %s connected from %s (user=%s, client_id=%s)",
            protocol,
            connection_id,
            peer or "?",
            user,
            client_id,
        )

    def disconnected(
        self, log: logging.Logger, connection_id: str, *, protocol: str, peer: str
    ) -> None:
        """Log that ``connection_id`` disconnected, at the level its connect had."""
        now = self._clock()
        known = self._connections.pop(connection_id, None)
        level = logging.INFO
        if known is not None:
            kind, level = known
            state = self._kinds.get(kind)
            if state is not None:
                state.open = max(0, state.open - 1)
                state.last_close = now
        log.log(level, "%s client %s (%s) disconnected", protocol, connection_id, peer or "?")
        self._sweep(log, now)

    def _sweep(self, log: logging.Logger, now: float) -> None:
        """At most once per ``summary_s``: summarize each kind's reconnections, forget
        the kinds that have been quiet long enough."""
        if now - self._last_sweep < self.summary_s:
            return
        self._last_sweep = now
        for kind, state in list(self._kinds.items()):
            if now - state.since >= self.summary_s:
                self._summarize(log, kind, state, now)
            idle = state.last_close is None or now - state.last_close >= self.quiet_s
            if state.open == 0 and idle and state.reconnections == 0:
                del self._kinds[kind]

    @staticmethod
    def _summarize(log: logging.Logger, kind: _Kind, state: _KindState, now: float) -> None:
        if state.reconnections:
            protocol, user, host, client_id = kind
            log.info(
                "%s client from %s (user=%s, client_id=%s): %d reconnection(s) in the last "
                "%.0f s (their connect and disconnect lines are at DEBUG)",
                protocol,
                host,
                user,
                client_id,
                state.reconnections,
                now - state.since,
            )
        state.reconnections = 0
        state.since = now


CONNECTIONS: Final = ConnectionLog()
"""The broker's: one per process (its state is only which lines to quieten)."""
