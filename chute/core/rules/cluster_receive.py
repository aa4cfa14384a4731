"""The receiving side of a node's cluster: :class:`Receiver` (the rest:
:mod:`chute.core.rules.cluster`).

A hand-over already in the in ledger is confirmed again without being stored; a new one
is placed on the queue it names, never routed (so it cannot loop). Hand-overs that
arrive together (one ``PeerHandovers``) are stored in one atomic commit: their messages
and one in ledger record naming the keys of all those the store holds; then confirmed
in one confirm. The queue's bounds apply: a full queue or subscription under ``block``
or ``reject`` refuses one (and this node announces its demand again once it has room;
the sender holds it until then). A record goes once every key it names is released;
after a crash it names them all again (the sender's resume then says which it may still
send: the rest are released).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from chute.core.model.cluster import (
    Handover,
    HandoverKey,
    KeyPair,
    KeyPairs,
    PeerPort,
    in_record,
    record_keys,
)
from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.store import AddOp, StoredMessage
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic
from chute.core.rules.cluster_peer import ClusterHost, Peer
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError, DestinationFull

log = logging.getLogger("chute.cluster")


class Receiver:
    """Hand-overs received from the other nodes, for one node's cluster: ``peer(name)``
    gives (or makes) what it knows of node ``name``; ``room_again(name, address)`` is
    called when a queue that refused a hand-over of ``name``'s has room. Used from the
    broker's loop only."""

    def __init__(
        self,
        host: ClusterHost,
        port: PeerPort,
        peer: Callable[[str], Peer],
        room_again: Callable[[str, str], None],
    ) -> None:
        self.host = host
        self.port = port
        self.peer = peer
        self.room_again = room_again

    def on_handovers(self, name: str, handovers: Sequence[Handover]) -> None:
        """Hand-overs from ``name``, in order: each stored (with its key), or confirmed again
        if it came before, or refused if its queue is full or cannot be. Those stored are
        stored in one atomic commit (their messages and the in ledger's records of their
        keys), then confirmed in one confirm."""
        peer = self.peer(name)
        host = self.host
        confirmed: list[HandoverKey] = []
        refused: list[HandoverKey] = []
        recorded: list[HandoverKey] = []  # stored in the journal: their keys recorded too
        found: dict[str, QueueChannel | Topic | Stream | None] = {}  # by address
        with host.atomically():
            for handover in handovers:
                key = handover.key
                if key in peer.received:
                    confirmed.append(key)
                    continue
                address = handover.address  # those of one batch mostly share their queue
                if address in found:
                    dest = found[address]
                else:
                    dest = found[address] = self._find(name, address)
                stored = None if dest is None else self._store(name, dest, handover)
                if stored is None:
                    refused.append(key)
                    continue
                peer.received[key] = 0
                confirmed.append(key)
                if stored:
                    recorded.append(key)
            if recorded:
                record = peer.received_ledger.record(host.store, in_record(recorded))
                peer.keys_of[record] = len(recorded)
                for key in recorded:
                    peer.received[key] = record
        if refused:
            self.port.send_refuse(name, refused)
        if confirmed:
            self.port.send_confirm(name, confirmed)

    def _find(self, name: str, address: str) -> QueueChannel | Topic | Stream | None:
        """The destination ``address`` names (made if need be), or None if it cannot take
        ``name``'s hand-overs (logged)."""
        try:
            dest = self.host.destination(address, create=True)
        except ChuteError as exc:
            log.warning("refused node %s's message for %s: %s", name, address, exc)
            return None
        if not isinstance(dest, QueueChannel | Topic | Stream):
            log.warning("refused node %s's message for %s: not a queue or topic", name, dest)
            return None
        return dest

    def _store(
        self, name: str, dest: QueueChannel | Topic | Stream, handover: Handover
    ) -> bool | None:
        """Place ``handover`` on ``dest`` (inside the caller's atomic commit): whether its
        message went to the store, or None if refused."""
        host = self.host
        if isinstance(dest, QueueChannel) and not dest.settings.bounded:
            # the common case on the per-message path, as the broker's own sends have it:
            # an unbounded queue takes the message, numbered next, stored if durable
            message = handover.message
            seq = dest.next_seq
            dest.next_seq = seq + 1
            entry = Entry(seq, message, handover.delivery_count, handover.redelivered)
            stored = dest.durable and message.persistent
            if stored:
                host.store.add(AddOp(dest.name, (dest.name,), seq, message))
                if handover.delivery_count:
                    host.store.delivered(dest.name, seq, handover.delivery_count)
            dest.place(entry)
            return stored
        try:
            route = host.route(dest, handover.message, arrived=True)
        except (WouldBlock, DestinationFull):
            address = dest.address  # a subscription's room frees its topic's address
            host.wait_for_room(address, lambda: self.room_again(name, address))
            return None
        if route.record is not None:
            host.store.add(route.record)
        for queue, entry in route.placements:
            entry.delivery_count = handover.delivery_count
            entry.redelivered = handover.redelivered
            if handover.delivery_count and queue.durable and entry.message.persistent:
                host.store.delivered(queue.name, entry.seq, handover.delivery_count)
        host.place(route)
        return route.record is not None

    def on_release(self, name: str, keys: KeyPairs) -> None:
        """``name`` removed its copies of ``keys``: forget them."""
        peer = self.peer(name)
        forget: Callable[[KeyPair, None], int | None] = peer.received.pop  # type: ignore[assignment]
        for key in keys:
            record = forget(key, None)
            if record:
                left = peer.keys_of.pop(record, 1) - 1
                if left > 0:
                    peer.keys_of[record] = left
                else:
                    peer.received_ledger.erase(self.host.store, record)

    @staticmethod
    def recover(peer: Peer, records: Sequence[StoredMessage]) -> None:
        """Take the in ledger's records of ``peer`` found by the broker's recovery."""
        for item in records:
            keys = record_keys(item.message)
            peer.keys_of[item.seq] = len(keys)
            for key in keys:
                peer.received[key] = item.seq
