"""Liveness: the heart-beats and the idle timeout of one client connection.

A :class:`Liveness` keeps when its connection last read and last wrote, and
the timers that act on that:

* heart-beats, once the protocol negotiated them (:meth:`Liveness.start_heartbeat`):
  the connection writes one when it wrote nothing for a while, and gives up on
  a client that sent nothing for too long (not while the broker itself does not
  read it: a producer held for room, say, whose heart-beats wait in the socket);
* for a client without heart-beats, ``idle_timeout_ms`` (:meth:`Liveness.watch_idle`):
  a client that sent and was sent nothing for that long is closed with its
  protocol's error, unless its connection holds it (a hold explains silence).

What it needs of its connection is :class:`Watched`. Lives on the server's
event loop only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Watched(Protocol):
    """What a :class:`Liveness` needs of its connection."""

    @property
    def gone(self) -> bool:
        """Closing, or its transport lost: no timer acts any more."""

    @property
    def on_hold(self) -> bool:
        """The broker holds the connection (its silence is explained)."""

    @property
    def input_held(self) -> bool:
        """The broker does not read the client for a reason of its own (a send waiting for
        room, say): the client's heart-beats wait unread in the socket."""

    def write_heartbeat(self) -> None:
        """Write one heart-beat of its protocol now."""

    def give_up(self, silent_for: float) -> None:
        """Drop a client that sent nothing for ``silent_for`` s despite heart-beats."""

    def close_idle(self, quiet: float) -> None:
        """Close a client that sent and was sent nothing for ``quiet`` s."""


class Liveness:
    """When one connection last read and wrote, and the timers that act on it."""

    __slots__ = (
        "_conn",
        "_expect_within",
        "_heartbeat",
        "_idle",
        "_idle_timeout",
        "_loop",
        "_send_every",
        "last_read",
        "last_write",
    )

    def __init__(self, conn: Watched, loop: asyncio.AbstractEventLoop, idle_timeout: float) -> None:
        self._conn = conn
        self._loop = loop
        self._idle_timeout = idle_timeout  # seconds (server.idle_timeout_ms); 0: never
        self.last_read = self.last_write = time.monotonic()
        self._heartbeat: asyncio.TimerHandle | None = None
        self._send_every = 0.0  # heart-beats: write one after this long without writing
        self._expect_within = 0.0  # ... and give up after this long without reading
        self._idle: asyncio.TimerHandle | None = None  # idle_timeout_ms, without heart-beats

    def stop(self) -> None:
        """The connection is gone: cancel every timer."""
        for timer in (self._heartbeat, self._idle):
            if timer is not None:
                timer.cancel()

    def watch_idle(self) -> None:
        """Close the client once it is idle for ``idle_timeout_ms`` (if set)."""
        if self._idle_timeout and self._idle is None:
            self._idle = self._loop.call_later(self._idle_timeout, self._check_idle)

    def _check_idle(self) -> None:
        self._idle = None
        conn = self._conn
        if conn.gone or self._expect_within:  # heart-beats govern it
            return
        timeout = self._idle_timeout
        quiet = time.monotonic() - max(self.last_read, self.last_write)
        if conn.on_hold or quiet < timeout:
            wait = timeout - quiet if quiet < timeout else timeout
            self._idle = self._loop.call_later(wait, self._check_idle)
            return
        conn.close_idle(quiet)

    def start_heartbeat(self, send_every: float, expect_within: float) -> None:
        """Write a heart-beat after ``send_every`` s without writing, and give up on the
        client after ``expect_within`` s without reading (0: never)."""
        self._send_every = send_every
        self._expect_within = expect_within
        if send_every or expect_within:
            self._heartbeat = self._loop.call_later(self._beat_interval(), self._beat)

    def _beat_interval(self) -> float:
        return min(s for s in (self._send_every, self._expect_within / 2) if s) / 2

    def _beat(self) -> None:
        conn = self._conn
        if conn.gone:
            return
        now = time.monotonic()
        if conn.input_held:  # its heart-beats wait in the socket, unread: count them heard
            self.last_read = now
        if self._expect_within and now - self.last_read > self._expect_within:
            conn.give_up(now - self.last_read)
            return
        if self._send_every and now - self.last_write >= self._send_every / 2:
            conn.write_heartbeat()
        self._heartbeat = self._loop.call_later(self._beat_interval(), self._beat)
