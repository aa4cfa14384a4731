"""Frames in progress: what logged-in clients began sending and have not finished.

A client that logged in may send a STOMP frame or a native packet of up to
``max_packet_size``. Until its last byte arrives, what came of it waits in the
connection's codec: memory the broker holds for a client that may never finish.
So after each read a driver tells :class:`PartialFrames` how many bytes its codec
holds (:meth:`PartialFrames.update`; the native protocol over HTTP counts a POST's
body as it is read), and those bytes are bounded four ways:

- per connection: a frame is at most ``max_packet_size`` (the codecs refuse a
  larger one from its header);
- per user: the bytes all of one user's connections hold unfinished are at most
  ``max_partial_bytes_per_user`` (anonymous clients share one allowance): the
  connection whose frame takes its user past it is closed, told why;
- against memory: they count with what the queues hold against
  ``memory_high_watermark``. While the two together are past it, a connection
  whose unfinished frame is over :data:`LARGE` and still grows is closed, told
  why, unless the broker holds it already (a producer waiting for room: smaller
  frames finish, and admission holds their producers as usual);
- in time: a connection whose frame received no byte for ``partial_frame_timeout_ms``
  while the broker was reading it (not holding it for flow control, a blocked
  send or its turn) is closed, told why.

What a client may not send at all is refused from the frame's header, before its
body arrives (the drivers: a STOMP SEND's ``destination``). Each closing is logged
once per flood (:class:`~chute.server.episode.Episode`) and counted in the
``sockets`` statistics.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, Final, Protocol

from chute.config import LimitSettings
from chute.core.model.paging import MemoryBudget
from chute.server.episode import Episode

LARGE: Final = 1 << 20
"""An unfinished frame this large is closed while memory is past its high watermark."""
REFUSE_FROM: Final = 64 << 10
"""A frame this much of which has arrived is refused from its header if its sender may
not send it (smaller ones are refused whole, as they arrive)."""
SWEEP_S: Final = 1.0
"""Seconds between two looks for frames that stopped arriving."""


class Sender(Protocol):
    """What :class:`PartialFrames` needs of a driver."""

    peer: str
    protocol_name: str

    @property
    def on_hold(self) -> bool:
        """The broker does not read the connection now (its own choice, not the client's)."""

    def unfinished(self) -> int:
        """Bytes received and not acted on yet."""

    def drop_unfinished(self) -> None:
        """Drop the bytes received and not acted on (the connection closes)."""

    def close_with_error(self, code: str, reason: str) -> None:
        """Tell the client ``reason`` in its protocol's error (``code``), then close."""


class _Held:
    __slots__ = ("moved", "size", "user")

    def __init__(self, user: str) -> None:
        self.user = user
        self.size = 0
        self.moved = time.monotonic()  # when its frame last grew (or the broker held it)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class PartialFrames:
    """Bytes of unfinished frames, by connection and user; see the module docstring."""

    def __init__(self, limits: LimitSettings) -> None:
        self.per_user = limits.max_partial_bytes_per_user
        self.timeout = limits.partial_frame_timeout_ms / 1000
        self.total = 0
        self.by_user: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self._held: dict[Sender, _Held] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self.over_user = Episode("connections closed by server.max_partial_bytes_per_user")
        self.over_memory = Episode("connections closed for unfinished frames past memory")
        self.stalled = Episode("connections closed by server.partial_frame_timeout_ms")
        self.forbidden = Episode("frames refused from their header: their sender may not send them")

    def update(
        self, sender: Sender, user: str | None, size: int, memory: MemoryBudget | None
    ) -> None:
        """``sender`` (acting for ``user``) now holds ``size`` bytes of unfinished input;
        it is closed if that breaks a bound (``memory``'s too, unless None: a tunnel's
        POST body, whole packets as much as a frame begun, counts against the others)."""
        held = self._held.get(sender)
        before = 0 if held is None else held.size
        if size == before:
            return
        key = user or ""
        if held is None:
            held = self._held[sender] = _Held(key)
            if self._sweep is None and self.timeout:
                self._start_sweep()
        grown = size - before
        self.total += grown
        self.by_user[held.user] += grown
        if size == 0:
            self._drop(sender, held)
            return
        held.size = size
        if grown < 0:
            return
        held.moved = time.monotonic()
        if self.per_user and self.by_user[held.user] > self.per_user:
            self.counts["closed_partial_per_user"] += 1
            self.over_user.hit(
                "%s client %s (user %s) would hold %s of unfinished frames over its "
                "connections, past server.max_partial_bytes_per_user (%s); closing",
                sender.protocol_name,
                sender.peer,
                key or "anonymous",
                _mib(self.by_user[held.user]),
                _mib(self.per_user),
            )
            self._close(
                sender,
                "partial-limit",
                f"this user's connections hold {_mib(self.by_user[held.user])} of frames "
                f"begun and not finished, past server.max_partial_bytes_per_user "
                f"({_mib(self.per_user)}): send large messages one at a time",
            )
        elif (
            memory is not None
            and memory.high
            and size >= LARGE
            and not sender.on_hold  # held by admission: its wait is admission's business
            and memory.used + self.total > memory.high
        ):
            self.counts["closed_partial_memory"] += 1
            self.over_memory.hit(
                "%s client %s holds %s of an unfinished frame while the broker's memory "
                "(queues %s, unfinished frames %s) is past memory_high_watermark (%s); closing",
                sender.protocol_name,
                sender.peer,
                _mib(size),
                _mib(memory.used),
                _mib(self.total),
                _mib(memory.high),
            )
            self._close(
                sender,
                "memory-short",
                f"the broker is short of memory for a frame of over {_mib(size)} "
                "(memory_high_watermark): try again later",
            )

    def _start_sweep(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a driver fed by hand (unit tests): the next update starts it
            return
        self._sweep = loop.call_later(SWEEP_S, self._look)

    def refused(self, sender: Sender, address: str, size: int, reason: str) -> None:
        """``sender`` began a frame of which ``size`` bytes arrived, to ``address``, where
        it may not send (``reason``): its driver closes it, telling it why."""
        self.counts["refused_from_header"] += 1
        self.forbidden.hit(
            "%s client %s began a frame to %s that it may not send (%s): refused after "
            "%s of it; closing",
            sender.protocol_name,
            sender.peer,
            address,
            reason,
            _mib(size),
        )

    def forget(self, sender: Sender) -> None:
        """``sender``'s connection is gone: what it held is freed."""
        held = self._held.get(sender)
        if held is not None:
            self.total -= held.size
            self.by_user[held.user] -= held.size
            self._drop(sender, held)

    def _drop(self, sender: Sender, held: _Held) -> None:
        del self._held[sender]
        if self.by_user[held.user] <= 0:
            del self.by_user[held.user]

    def _close(self, sender: Sender, code: str, reason: str) -> None:
        self.forget(sender)
        sender.close_with_error(code, reason)
        sender.drop_unfinished()  # never acted on now: its bytes go at once

    def _look(self) -> None:
        """Close the connections whose frame stopped arriving."""
        now = time.monotonic()
        for sender, held in list(self._held.items()):
            size = sender.unfinished()
            if size < held.size:  # acted on in a later turn, since its last read
                self.update(sender, held.user, size, None)
                if not size:
                    continue
            if sender.on_hold:
                held.moved = now  # the broker holds it: the client is not to blame
            elif now - held.moved > self.timeout:
                self.counts["closed_partial_timeout"] += 1
                self.stalled.hit(
                    "%s client %s sent no byte of its unfinished frame (%s so far) for "
                    "%g s (server.partial_frame_timeout_ms); closing",
                    sender.protocol_name,
                    sender.peer,
                    _mib(held.size),
                    self.timeout,
                )
                self._close(
                    sender,
                    "frame-timeout",
                    f"no byte of an unfinished frame for {self.timeout:g} s "
                    "(server.partial_frame_timeout_ms)",
                )
        self._sweep = (
            asyncio.get_running_loop().call_later(SWEEP_S, self._look) if self._held else None
        )

    def stats(self) -> dict[str, Any]:
        """What the ``sockets`` statistics show of unfinished frames."""
        return {
            "partial_frame_bytes": self.total,
            **{
                name: self.counts[name]
                for name in (
                    "closed_partial_per_user",
                    "closed_partial_memory",
                    "closed_partial_timeout",
                    "refused_from_header",
                )
            },
        }

    def close(self) -> None:
        """The broker stops."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for episode in (self.over_user, self.over_memory, self.stalled, self.forbidden):
            episode.cancel()
