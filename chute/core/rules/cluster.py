"""A node of a cluster: its queues' peers, hand-overs sent and received (the words:
:mod:`chute.core.model.cluster`).

Routing (Artemis's on-demand load balancing, local first): a message stays on the
node it was sent to and goes to a local consumer that can take it (one with credit
whose selector matches); otherwise to a *peer consumer*, one per other node that
announced consumers of the queue (:class:`~chute.core.model.cluster.Demand`),
its selector the union of theirs, its credit the link's window; round-robin among
those; never to a node without consumers. Redistribution needs nothing more: when
the local consumers leave, waiting messages flow to the peer consumers, and when a
node announces consumers, the messages waiting here flow to it.

A peer consumer's in-flight messages are its node's unconfirmed hand-overs. A
confirm settles the message here (its ack and the out ledger's record erased in one
atomic commit) and returns a credit; a refusal puts it back as it was. When the link
goes down they stay in doubt with that node (it may have stored them) and are sent
again, with the same keys, when the link comes up; only when the node leaves the
cluster for good (:meth:`Cluster.node_gone`) do they go back to the queue, flagged
redelivered, as a consumer's would. A transaction's sends reach the queue at its
commit, so they are handed over only after it.

Receiving (:mod:`chute.core.rules.cluster_receive`): a hand-over already in the in
ledger is confirmed again without being stored; a new one is placed on the queue it
names, never routed (so it cannot loop); those that arrive together are stored in one
atomic commit (messages and in ledger record) and confirmed in one confirm; the queue's
bounds apply (a full queue refuses, and this node announces its demand again once it has
room; the sender holds it until then). What this node keeps of each other node, and
what it needs of its broker: :mod:`chute.core.rules.cluster_peer`.

Topics: a node announces, per topic, the selectors of its subscriptions; the other
nodes each keep a *peer subscription* of the topic standing for it (durable, its
selector the union of that node's, its one consumer a peer consumer), so a message
published on any node is handed over once to each node with subscriptions that
want it, and there routed to its own subscriptions only (never to its peer
subscriptions: the publishing node sent every node its copy), each once.

What a node wants is announced as it changes (:meth:`Cluster.consumers_changed`) and
whole when a link comes up (:meth:`Cluster.link_up`): what that does not name, the
node no longer wants. Temporary and login-name queues are announced by their own rules
(:mod:`chute.core.rules.cluster_owned`): a temporary queue by its node for as long as
it lives, the other nodes holding a *stand-in* of it that hands everything over.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial

from chute.core.model.address import Kind, parse
from chute.core.model.cluster import (
    IN_PREFIX,
    OUT_PREFIX,
    PEER_PREFIX,
    Demand,
    Handover,
    HandoverKey,
    KeyPair,
    KeyPairs,
    PeerPort,
    out_record,
    peer_of,
    peer_subscription_key,
    record_key,
    union_selector,
    union_text,
)
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Destination
from chute.core.model.selector import compile_selector
from chute.core.model.store import StoredMessage
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.rules.cluster_owned import StandIns, queue_demand
from chute.core.rules.cluster_peer import ClusterHost, Peer, Sent, peer_queue
from chute.core.rules.cluster_receive import Receiver
from chute.core.rules.cluster_window import DEFAULT_LINK_BYTES, DEFAULT_LINK_WINDOW, LinkWindow
from chute.errors import ChuteError

log = logging.getLogger("chute.cluster")

DEFAULT_WINDOW = 256
"""Hand-overs a peer consumer may have unconfirmed (its credit)."""


class _Outbound:
    """The receiver of one node's peer consumers: a push is a hand-over."""

    def __init__(self, cluster: Cluster, peer: Peer) -> None:
        self.cluster = cluster
        self.peer = peer
        # a push: ``hand_over(peer, consumer, entry)``, with no Python step between
        self.handle: Callable[[BrokerConsumer, Entry], None] = partial(cluster.hand_over, peer)

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """The queue was deleted: what was in doubt goes with it."""
        peer = self.peer
        for address, c in list(peer.consumers.items()):
            if c is consumer:
                del peer.consumers[address]
        for key, sent in list(peer.in_doubt.items()):
            if sent.consumer is consumer:
                peer.settle(key)
        self.cluster.settled(peer)


class Cluster:
    """One node's side of a cluster, over its broker (``host``) and its links (``port``).

    ``run`` names this start of the node, unique across its starts (the server gives a
    random one): it keys new hand-overs. Made once the broker recovered (what it
    holds then, durable subscriptions above all, is what it announces first), then
    :meth:`recover` takes the ledgers. Used from the broker's loop only.
    """

    def __init__(
        self,
        host: ClusterHost,
        port: PeerPort,
        *,
        node: str,
        run: str,
        window: int = DEFAULT_WINDOW,
        link_window: int = DEFAULT_LINK_WINDOW,
        link_bytes: int = DEFAULT_LINK_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.node = node
        self.run = run
        self.window = window
        self.link_window = link_window
        self.link_bytes = link_bytes
        self.peers: dict[str, Peer] = {}
        self.queues: dict[str, QueueChannel] = {}
        """Queues of the cluster's own, by store name, that are no destination of the
        broker's (a stream's forward queue: :mod:`chute.core.rules.cluster_streams`)."""
        self.announced: dict[str, tuple[str | None, ...]] = {}
        self.standins = StandIns(host)  # other nodes' temporary queues
        self.receiver = Receiver(host, port, self._peer, self._room_again)
        self._ids = itertools.count(-1, -1)
        host.demand_watch = self.consumers_changed
        for topic in host.topics.values():  # durable subscriptions made before (recovered)
            selectors = self.topic_demand(topic)
            if selectors:
                self.announced[topic.address] = selectors
        for queue in host.queues.values():
            wanted = queue_demand(host, queue, self.standins)
            if wanted:
                self.announced[queue.address] = wanted

    def _peer(self, name: str) -> Peer:
        peer = self.peers.get(name)
        if peer is None:
            peer = self.peers[name] = Peer(name, LinkWindow(self.link_window, self.link_bytes))
        return peer

    # -- the links ------------------------------------------------------------------

    def link_up(self, name: str) -> None:
        """The link to ``name`` is up: say what may come again, send again what is in
        doubt (same keys), and announce this node's consumers."""
        peer = self._peer(name)
        peer.up = True
        demands = [Demand(a, s) for a, s in sorted(self.announced.items())]
        self.port.send_resume(name, sorted(peer.in_doubt), demands)
        for sent in sorted(peer.in_doubt.values(), key=lambda s: s.handover.key):
            self.port.send_handover(name, sent.handover)

    def link_down(self, name: str) -> None:
        """The link to ``name`` is lost: nothing more goes there until it is up again and
        the node announced its consumers again; what is in doubt stays in doubt."""
        peer = self._peer(name)
        peer.up = False
        for consumer in peer.consumers.values():
            peer.window.hold(consumer, True)

    def node_gone(self, name: str) -> None:
        """``name`` left the cluster for good: what was in doubt with it goes back to its
        queues, flagged redelivered (it may have been delivered there). But what waits
        for it alone (the forward queue of a stream homed there, one of :attr:`queues`)
        stays in doubt, to be sent again with the same keys if it comes back.

        What it handed over here stays known (its keys, until it releases them or, should
        it come back, resumes without them), and so does the numbering of what this node
        hands over to it: a node seen leaving may be alive (cut off from etcd and from
        here for longer than its lease) and come back holding in doubt what this node
        stored; it then sends those again with the same keys."""
        self.link_down(name)
        peer = self.peers.get(name)
        if peer is None:
            return
        owned = self.queues
        for key, sent in list(peer.in_doubt.items()):
            if sent.queue.name in owned:
                continue
            if sent.record:
                peer.out.erase(self.host.store, sent.record)
            del peer.in_doubt[key]
        for address, consumer in list(peer.consumers.items()):
            if consumer.queue.name in owned:
                continue
            consumer.queue.detach(consumer)
            del peer.consumers[address]
        for address in self.standins.of(name):
            self.standins.drop(name, address)

    # -- demand ----------------------------------------------------------------------

    def consumers_changed(self, queue: QueueChannel) -> None:
        """A local consumer came to ``queue`` or left (or ``queue``, a temporary one, was
        made or deleted): tell the nodes if that changed what this node announced."""
        if isinstance(queue, Subscription):
            if queue.name.startswith(PEER_PREFIX):
                return
            selectors = self.topic_demand(queue.topic)
        else:
            found = queue_demand(self.host, queue, self.standins)
            if found is None:
                return
            selectors = found
        if self.announced.get(queue.address, ()) == selectors:
            return
        if selectors:
            self.announced[queue.address] = selectors
        else:
            self.announced.pop(queue.address, None)
        demand = Demand(queue.address, selectors)
        for peer in self.peers.values():
            if peer.up:
                self.port.send_demand(peer.name, demand)

    @staticmethod
    def topic_demand(topic: Topic) -> tuple[str | None, ...]:
        """The selectors of ``topic``'s subscriptions on this node, in a stable order."""
        texts = [s.selector_text for key, s in topic.subscriptions.items() if peer_of(key) is None]
        return tuple(sorted(texts, key=lambda t: (t is not None, t or "")))

    def on_demand(self, name: str, demand: Demand) -> None:
        """``name`` announced its consumers of a queue (this node's peer of the queue gets,
        updates or holds the peer consumer standing for it), or its subscriptions of a
        topic (the topic's peer subscription for it is made, updated or dropped). One
        this node cannot follow (a bad address or selector) is logged and ignored."""
        try:
            self._demand(name, demand)
        except ChuteError as exc:
            log.warning("ignored node %s's consumers of %s: %s", name, demand.address, exc)

    def _demand(self, name: str, demand: Demand) -> None:
        peer = self._peer(name)
        if demand.selectors:
            peer.wants.add(demand.address)
        else:
            peer.wants.discard(demand.address)
        if parse(demand.address).kind is Kind.TOPIC:
            self._topic_demand(peer, demand)
            return
        consumer = peer.consumers.get(demand.address)
        temporary = parse(demand.address).is_temporary
        if not demand.selectors:
            if temporary:
                if self.standins.drop(name, demand.address):
                    peer.consumers.pop(demand.address, None)
            elif consumer is not None:
                peer.window.hold(consumer, True)
            return
        selector = union_selector(demand.selectors)
        dest: Destination | None
        if temporary:
            dest = self.standins.make(name, demand.address)
            if dest is None:
                return
        else:
            dest = self.host.destination(demand.address, create=True)
        if not isinstance(dest, QueueChannel):
            log.warning("node %s announced consumers of %s, not a queue here", name, dest)
            return
        if consumer is None or consumer.closed:
            consumer = self._peer_consumer(peer, dest)
            consumer.selector = selector
            peer.window.hold(consumer, False)
            dest.attach(consumer)
        else:
            peer.window.hold(consumer, False)
            dest.reselect(consumer, selector)

    def _topic_demand(self, peer: Peer, demand: Demand) -> None:
        topic = self.host.destination(demand.address, create=True)
        if not isinstance(topic, Topic):
            return
        key = peer_subscription_key(peer.name, topic.address)
        sub = self.host.subscriptions.get(key)
        if not demand.selectors:
            if sub is not None:
                self._drop_peer_subscription(peer, sub)
            return
        text = union_text(demand.selectors)
        if sub is None:
            sub = self.host.subscriptions.create(
                key, topic, SubscriptionKind.DURABLE, selector=text
            )
        else:
            sub.selector = compile_selector(text) if text is not None else None
        consumer = peer.consumers.get(topic.address)
        if consumer is None or consumer.closed:
            consumer = self._peer_consumer(peer, sub)
            peer.window.hold(consumer, not peer.up)
            sub.attach(consumer)
        else:
            peer.window.hold(consumer, not peer.up)
            sub.deliver()

    def _drop_peer_subscription(self, peer: Peer, sub: Subscription) -> None:
        """``peer`` no longer subscribes to the topic: its copies waiting here go (it may
        have stored those in doubt; their keys stay known there until released)."""
        consumer = peer.consumers.pop(sub.address, None)
        if consumer is not None:
            for key, sent in list(peer.in_doubt.items()):
                if sent.consumer is consumer:
                    peer.settle(key)
                    if sent.record:
                        peer.out.erase(self.host.store, sent.record)
            sub.requeue(consumer.inflight.values())
            consumer.inflight.clear()
            sub.detach(consumer)
            self.settled(peer)
        self.host.subscriptions.drop(sub)

    def _peer_consumer(self, peer: Peer, queue: QueueChannel) -> BrokerConsumer:
        consumer = BrokerConsumer(
            next(self._ids),
            queue,
            _Outbound(self, peer),
            ack_mode=AckMode.INDIVIDUAL,
            credit=self.window,
            peer=True,
        )
        consumer.held = True
        peer.consumers[queue.address] = consumer
        return consumer

    def feed(self, name: str, queue: QueueChannel) -> None:
        """Every message of ``queue`` goes to node ``name`` (a stream's forward queue, the
        stream homed there), whatever that node announced: its peer consumer there, made
        if needed, takes them while the link is up."""
        peer = self._peer(name)
        consumer = peer.consumers.get(queue.address)
        if consumer is None or consumer.closed or consumer.queue is not queue:
            consumer = self._peer_consumer(peer, queue)
            queue.attach(consumer)
        consumer.held = not peer.up
        if peer.up:
            queue.deliver()

    # -- sending ---------------------------------------------------------------------

    def hand_over(self, peer: Peer, consumer: BrokerConsumer, entry: Entry) -> None:
        """The queue pushed ``entry`` to ``peer``'s consumer: record it, send it."""
        entry.delivery_count -= 1  # a hand-over is no delivery (max_deliveries, redelivered)
        queue = consumer.queue
        if not isinstance(queue, QueueChannel):  # peer_queue's check, inline
            raise TypeError(f"a peer consumer of {queue!r}, not a queue")
        n = peer.next_n
        peer.next_n = n + 1
        # the named tuples made as their own constructors make them, with no Python step
        key = tuple.__new__(HandoverKey, (self.run, n))
        handover = tuple.__new__(
            Handover, (key, queue.address, entry.message, entry.delivery_count, entry.redelivered)
        )
        message = entry.message
        record = 0
        if queue.durable and message.persistent:
            record = peer.out.record(self.host.store, out_record(handover, queue.name, entry.seq))
        # Peer.doubt and LinkWindow.add, inline on the per-message path
        peer.in_doubt[key] = tuple.__new__(Sent, (queue, consumer, entry, record, handover))
        window = peer.window
        window.count += 1
        window.nbytes += message.size
        if window.held is None and (
            window.count >= window.size or window.nbytes >= window.max_bytes
        ):
            window.sent(peer.consumers.values())
        if peer.up:
            self.port.send_handover(peer.name, handover)

    def on_confirm(self, name: str, keys: KeyPairs) -> None:
        """``name`` stored the hand-overs ``keys``: remove the copies here (each queue's in
        one bulk ack, and their records, in one atomic commit), return their credits, then
        release the keys."""
        peer = self._peer(name)
        in_doubt = peer.in_doubt
        found = 0
        released: list[KeyPair] | None = None  # once a key was not in doubt: those that were
        queues: dict[int, tuple[QueueChannel, list[Entry]]] = {}  # by id: its acked entries
        records: list[int] = []
        nbytes = 0
        last: QueueChannel | None = None  # a confirm's keys mostly share their queue
        entries: list[Entry] = []
        take: Callable[[KeyPair, None], Sent | None] = in_doubt.pop  # type: ignore[assignment]
        with self.host.atomically():
            for key in keys:
                sent = take(key, None)
                if sent is None:  # not in doubt (any more): not released again
                    if released is None:
                        released = list(keys[:found])  # every key before this one was
                    continue
                found += 1
                if released is not None:
                    released.append(key)
                queue, consumer, entry, record, handover = sent
                nbytes += handover.message.size
                consumer.credit += 1
                if queue is not last:
                    acked = queues.get(id(queue))
                    if acked is None:
                        acked = queues[id(queue)] = (queue, [])
                    last, entries = queue, acked[1]
                if consumer.inflight.pop(entry.seq, None) is not None:
                    entries.append(entry)
                if record:
                    records.append(record)
            peer.window.remove(nbytes, found)
            for queue, entries in queues.values():
                if entries:
                    queue.settle_acked(entries)
            if records:
                peer.out.erase_all(self.host.store, records)
        for queue, _entries in queues.values():
            if queue.ready:
                queue.deliver()
        self.settled(peer)
        if released is None:  # every one was in doubt: the usual case
            self.port.send_release(name, keys)
        elif released:
            self.port.send_release(name, released)

    def on_refuse(self, name: str, keys: Sequence[HandoverKey]) -> None:
        """``name`` did not take ``keys`` (its queue is full): they wait here as they were,
        and that node gets no more of the queue until it announces its consumers again."""
        peer = self._peer(name)
        done: list[Sent] = []
        with self.host.atomically():
            for key in keys:
                sent = peer.settle(key)
                if sent is None:
                    continue
                consumer, entry = sent.consumer, sent.entry
                peer.window.hold(consumer, True)
                if entry.seq in consumer.inflight:
                    consumer.take_acked(entry.seq, cumulative=False)
                    entry.redelivered = sent.handover.redelivered
                    sent.queue.put_back([entry])
                if sent.record:
                    peer.out.erase(self.host.store, sent.record)
                done.append(sent)
        self._return_credit(done)
        self.settled(peer)

    def settled(self, peer: Peer) -> None:
        """Hand-overs to ``peer`` left doubt: the link's window may open again."""
        for consumer in peer.window.settled():
            queue = peer_queue(consumer)
            if queue.ready:
                queue.deliver()

    @staticmethod
    def _return_credit(done: Iterable[Sent]) -> None:
        queues: dict[int, QueueChannel] = {}
        for sent in done:
            sent.consumer.credit += 1
            queues[id(sent.queue)] = sent.queue
        for queue in queues.values():
            if queue.ready:
                queue.deliver()

    # -- receiving -------------------------------------------------------------------

    def on_handover(self, name: str, handover: Handover) -> None:
        """A hand-over from ``name``: :meth:`on_handovers` of one."""
        self.receiver.on_handovers(name, [handover])

    def on_handovers(self, name: str, handovers: Sequence[Handover]) -> None:
        """Hand-overs from ``name``, in order (:meth:`Receiver.on_handovers
        <chute.core.rules.cluster_receive.Receiver.on_handovers>`)."""
        self.receiver.on_handovers(name, handovers)

    def on_release(self, name: str, keys: KeyPairs) -> None:
        """``name`` removed its copies of ``keys``: forget them."""
        self.receiver.on_release(name, keys)

    def _room_again(self, name: str, address: str) -> None:
        """A queue (a topic's subscription) that refused a hand-over has room: announce
        what this node wants of it again, which lets ``name`` hand over again."""
        peer = self.peers.get(name)
        selectors = self.announced.get(address)
        if peer is not None and peer.up and selectors:
            self.port.send_demand(name, Demand(address, selectors))

    def on_resume(self, name: str, keys: Sequence[HandoverKey], demands: Sequence[Demand]) -> None:
        """``name``'s link came up: it may send again only ``keys`` (forget the rest), and
        wants ``demands`` and nothing else."""
        peer = self._peer(name)
        again = set(keys)
        self.on_release(name, [k for k in peer.received if k not in again])
        named = {d.address for d in demands}
        for address in sorted(peer.wants - named):
            self.on_demand(name, Demand(address, ()))
        for demand in demands:
            self.on_demand(name, demand)

    # -- recovery --------------------------------------------------------------------

    def recover(self) -> None:
        """Take the ledgers the broker's recovery found (call after ``Broker.recover``):
        keys received and not released, and hand-overs in doubt, taken out of their
        queues again to be sent again (same keys) when their node's link comes up."""
        host = self.host
        for name, (next_seq, records) in sorted(host.ledgers.items()):
            if name.startswith(IN_PREFIX):
                peer = self._peer(name[len(IN_PREFIX) :])
                ledger = peer.received_ledger
                Receiver.recover(peer, records)
            elif name.startswith(OUT_PREFIX):
                peer = self._peer(name[len(OUT_PREFIX) :])
                ledger = peer.out
                for item in records:
                    self._recover_sent(peer, item)
            else:
                continue
            ledger.defined = True
            ledger.next_seq = max(ledger.next_seq, next_seq, *(r.seq + 1 for r in records))
        host.ledgers.clear()
        for sub_key in [k for k in host.subscriptions if peer_of(k) is not None]:
            sub = host.subscriptions[sub_key]
            peer = self._peer(peer_of(sub_key) or "")
            peer.wants.add(sub.address)
            if sub.address not in peer.consumers:
                sub.attach(self._peer_consumer(peer, sub))

    def _recover_sent(self, peer: Peer, item: StoredMessage) -> None:
        props = item.message.properties
        name = str(props["queue"])
        queue = self.queues.get(name) or self.host.queue_by_name(name)
        taken = queue.withdraw_many([int(props["seq"])]) if queue is not None else []
        if queue is None or not taken:  # the message left its queue meanwhile
            peer.out.erase(self.host.store, item.seq)
            return
        entry = taken[0]
        entry.delivery_count = int(props["count"])
        entry.redelivered = bool(props["redelivered"])
        consumer = peer.consumers.get(queue.address)
        if consumer is None:
            consumer = self._peer_consumer(peer, queue)
            queue.attach(consumer)
        consumer.credit -= 1
        consumer.inflight[entry.seq] = entry
        key = record_key(item.message)
        handover = Handover(
            key, queue.address, entry.message, entry.delivery_count, entry.redelivered
        )
        peer.doubt(key, Sent(queue, consumer, entry, item.seq, handover))
