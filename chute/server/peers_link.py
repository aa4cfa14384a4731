"""A link that is up, as it writes: :class:`PeerLink` (the rest: :mod:`chute.server.peers`).

The PeerPort's contract: a hand-over, a confirm or a release goes out only once every
record the store was told so far is durable. A link holds such a packet and what
follows it (the order on a link is the order of the calls) until a sync lets it go,
and writes them in one write once the store answers; packets that follow no such
packet go out at once. While they wait, hand-overs one after the other join into one
``PeerHandovers`` (the other node stores them in one commit and confirms them in one
confirm), confirms into one ``PeerConfirm`` and releases into one ``PeerRelease``, and
a demand replaces the one held for its address. A sync asked for covers what is held
when it starts (its seal: the loop's turn ended), so one packet of each kind per turn;
what comes once it started never joins what it covers (that may not be on disk when
it is done) and waits for the next.
A link stops its transport's reading while what it holds passes its bound
(:data:`LINK_BACKLOG`), and reads again once that is down to half.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from chute.core.model.cluster import Handover
from chute.errors import ChuteError
from chute.protocol import packets as p
from chute.protocol.peer_packets import Keys, handovers_parts
from chute.protocol.spec import HEADER, HEADER_REST
from chute.protocol.wire import encode_packet

LINK_BACKLOG: Final = 1 << 20
"""Bytes a link may hold waiting for the store's sync before it stops reading (it reads
again once they are down to half)."""


class PeerRefused(ChuteError):
    """The other node refused the link (its answer says why)."""

    code = "peer-refused"


MAX_BATCHED_KEYS: Final = 4096
"""The most keys one PeerConfirm or PeerRelease gathers while it waits for a sync."""


KEY_BYTES: Final = 24
"""What one key of a gathered confirm or release counts for in a link's backlog (about
its encoded size)."""

MAX_BATCHED_HANDOVERS: Final = 1024
"""The most hand-overs one PeerHandovers gathers while it waits for a sync."""

MAX_BATCHED_BYTES: Final = 1 << 20
"""The most bytes of messages one PeerHandovers gathers (it may pass it by one message)."""

_HANDOVERS_TAG: Final = int(p.PacketType.PEER_HANDOVERS)

HANDOVER_BYTES: Final = 64
"""What one hand-over counts for in a link's backlog besides its message's size."""


class _Batch:
    """Confirms (or releases) waiting behind a sync, one after the other: they go as one
    packet of all their keys."""

    __slots__ = ("keys", "kind")

    def __init__(self, kind: type[p.PeerConfirm | p.PeerRelease], keys: Keys) -> None:
        self.kind = kind
        self.keys = list(keys)

    def encode(self) -> bytes:
        return encode_packet(self.kind(tuple(self.keys)), version=p.PEER_VERSION)


class _Handovers:
    """Hand-overs of one run waiting behind a sync, one after the other: they go as one
    ``PeerHandovers`` (a ``PeerHandover`` if alone), which the other node stores in one
    commit and confirms in one confirm."""

    __slots__ = ("items", "run", "size")

    def __init__(self, first: Handover) -> None:
        self.run = first.key.run
        self.items = [first]
        self.size = first.message.size + HANDOVER_BYTES

    def encode(self) -> bytes:
        if len(self.items) == 1:
            h = self.items[0]
            packet = p.PeerHandover(
                h.key.run, h.key.n, h.address, h.delivery_count, h.redelivered, h.message
            )
            return encode_packet(packet, version=p.PEER_VERSION)
        # the header and the body's parts in one join: each message's bytes copied once
        parts = handovers_parts(self.run, self.items)
        size = sum(map(len, parts))
        return b"".join(
            (HEADER.pack(size + HEADER_REST, p.PEER_VERSION, _HANDOVERS_TAG, 0, 0, 0), *parts)
        )


def always_reads(reading: bool) -> None:
    """A link's transport that cannot stop reading (a test's)."""


class PeerLink:
    """One link that is up: writes packets in order, holding what follows a packet that
    must wait for the store's sync, and stops its transport's reading (``reading(False)``)
    while that holds more than ``bound`` bytes."""

    def __init__(
        self,
        name: str,
        write: Callable[[bytes], None],
        close: Callable[[], None],
        reading: Callable[[bool], None] = always_reads,
        bound: int = LINK_BACKLOG,
    ) -> None:
        self.name = name
        self.write = write
        self.close = close
        self.reading = reading
        self.bound = bound
        self.pending: list[bytes | _Batch | _Handovers] = []  # b"": a demand replaced
        self.backlog = 0  # bytes in pending
        self.flushed = 0  # packets that left pending so far (pending[0]'s number)
        self.demands: dict[str, int] = {}  # address -> the number of its demand held
        self.paused = False  # reading stopped for the backlog
        self.durable = 0  # pending[:durable] may go once a sync covers them
        self.covered = 0  # pending[:covered] go once the sync asked for is done
        self.syncing = False
        self.open = False  # a sync is asked for, not yet started: what is held joins it
        self.closed = False

    def hold(self, data: bytes, demand: str | None = None) -> None:
        """Keep ``data`` until a sync lets it go; past the bound, stop reading. A demand
        (of the address ``demand``) replaces the one held for that address, if any: what
        the other node must know is the last (it goes where the last one was asked)."""
        if demand is not None:
            earlier = self.demands.get(demand, -1) - self.flushed
            if earlier >= 0:
                replaced = self.pending[earlier]
                if isinstance(replaced, bytes):
                    self.backlog -= len(replaced)
                    self.pending[earlier] = b""
            self.demands[demand] = self.flushed + len(self.pending)
        self.pending.append(data)
        self._grew(len(data))

    def hold_keys(self, kind: type[p.PeerConfirm | p.PeerRelease], keys: Keys) -> None:
        """Keep a confirm or release until a sync lets it go: joined to the same kind of
        packet right before it when that one is not covered by a sync already started
        (what this one says may not be on disk when that sync is done)."""
        last = self._open_last()
        if isinstance(last, _Batch) and last.kind is kind and len(last.keys) < MAX_BATCHED_KEYS:
            last.keys.extend(keys)
        else:
            self.pending.append(_Batch(kind, keys))
        self._grew(len(keys) * KEY_BYTES)

    def hold_handover(self, handover: Handover) -> int:
        """Keep a hand-over until a sync lets it go: joined to the hand-overs right before it
        when those are not covered by a sync already started (as :meth:`hold_keys`). Returns
        how many packets are held now (on the per-message path: :meth:`_open_last` and
        :meth:`_grew`, inline)."""
        pending = self.pending
        size = handover.message.size + HANDOVER_BYTES
        last = pending[-1] if pending and (self.open or len(pending) > self.covered) else None
        if (
            type(last) is _Handovers
            and last.run == handover.key.run
            and len(last.items) < MAX_BATCHED_HANDOVERS
            and last.size < MAX_BATCHED_BYTES
        ):
            last.items.append(handover)
            last.size += size
        else:
            pending.append(_Handovers(handover))
        self.backlog += size
        if not self.paused and self.backlog > self.bound:
            self.paused = True
            self.reading(False)
        return len(pending)

    def _open_last(self) -> bytes | _Batch | _Handovers | None:
        """The last packet held, if what is held now may join it: no sync covering it
        started yet (one asked for and not started covers what joins it too)."""
        if self.pending and (self.open or len(self.pending) > self.covered):
            return self.pending[-1]
        return None

    def _grew(self, size: int) -> None:
        self.backlog += size
        if not self.paused and self.backlog > self.bound:
            self.paused = True
            self.reading(False)

    def flush(self, count: int) -> None:
        """Write the first ``count`` packets held, in one write; below half the bound,
        read again."""
        items = self.pending[:count]
        del self.pending[:count]
        self.flushed += count
        data: list[bytes] = []
        for item in items:
            if isinstance(item, _Batch):
                self.backlog -= len(item.keys) * KEY_BYTES
                data.append(item.encode())
            elif isinstance(item, _Handovers):
                self.backlog -= item.size
                data.append(item.encode())
            elif item:
                self.backlog -= len(item)
                data.append(item)
        if len(data) == 1:
            self.write(data[0])
        elif data:
            self.write(b"".join(data))
        if not self.pending:
            self.demands.clear()
        if self.paused and self.backlog <= self.bound // 2:
            self.paused = False
            self.reading(True)
