"""A cluster's words: what nodes send each other about distributed queues.

Every node holds a peer of every queue (JBoss Messaging's ``DistributedQueuePeer``). A node
tells the others which of its queues have consumers, and with which selectors: a
:class:`Demand`. A node that heard another's demand for a queue gives its own peer
of that queue a *peer consumer* (:attr:`~chute.core.model.consumer.BrokerConsumer.peer`)
standing for that node, which the queue's router tries only when no local consumer
can take a message. Pushing a message to a peer consumer is a :class:`Handover`: the
message, the queue it goes to on the other node (never routed again there), and a
:class:`HandoverKey` naming it on this link.

Store-and-forward (Guaranteed Delivery): the sending node records the hand-over in
its *out* :class:`Ledger` for that node before it sends it; the receiving node stores
the message and records the key in its *in* ledger in one atomic commit (hand-overs
that arrive together: their messages and one record naming all their keys), and
confirms once that is durable; the sender then removes its copy and its record in
one atomic commit, and releases the key, which the receiver then forgets. A
hand-over repeated after a crash or a cut link carries the same key and is
confirmed again without being stored twice. The key is the link's and the sending
run's (``run``: a new one each time a node starts; ``n``: counted per link), not
the message's id, since a message may come back to a node by redistribution.

A ledger is a queue of kind :attr:`~chute.core.model.store.QueueKind.LEDGER` in
the store whose "messages" are these records (:func:`out_record`,
:func:`in_record`): they share the journal's records, its atomic commits and its
recovery with everything else.

The transport between nodes implements :class:`PeerPort`. Pure: nothing here
touches a socket.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import NamedTuple, Protocol

from chute.core.model.selector import Selector, compile_selector
from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, Store
from chute.message import Message

OUT_PREFIX = "cluster.out:"
"""The store name of the ledger of hand-overs sent to a node: this, then its name."""
IN_PREFIX = "cluster.in:"
"""The store name of the ledger of hand-overs received from a node."""
PEER_PREFIX = "cluster.peer:"
"""The key of a topic's *peer subscription*: the subscription standing for another node's
subscriptions of the topic (what it hands over is one copy for all of them)."""


def peer_subscription_key(node: str, topic: str) -> str:
    """The key of the peer subscription of ``topic`` standing for ``node``."""
    return f"{PEER_PREFIX}{node}|{topic}"


def peer_of(key: str) -> str | None:
    """The node a subscription key stands for, if it is a peer subscription's."""
    if not key.startswith(PEER_PREFIX):
        return None
    return key[len(PEER_PREFIX) :].partition("|")[0]


class HandoverKey(NamedTuple):
    """One hand-over on one link: the sending node's run and its number in that run (a
    named tuple: made, hashed and compared for every hand-over, at C speed)."""

    run: str
    n: int


KeyPair = tuple[str, int]
"""A key as a confirm or release carries it: a ``(run, n)`` pair, equal to (and hashed as)
the :class:`HandoverKey` it names, so it finds that key in a dict as it is, without a
key made per pair (a confirm names hundreds)."""

KeyPairs = Sequence[KeyPair]


def handover_keys(pairs: Iterable[tuple[str, int]]) -> list[HandoverKey]:
    """``(run, n)`` pairs as keys, made as the named tuple's own constructor makes one
    (``tuple.__new__``), with no Python step per key: a confirm or release names hundreds."""
    return list(map(tuple.__new__, repeat(HandoverKey), pairs))


class Handover(NamedTuple):
    """A message handed to another node, for the queue ``address`` there.

    ``delivery_count`` and ``redelivered`` are the message's history on the sending
    node (a message redistributed after its consumer went away stays flagged). A named
    tuple, as :class:`HandoverKey`: one is made on each side of every hand-over."""

    key: HandoverKey
    address: str
    message: Message
    delivery_count: int = 0
    redelivered: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Demand:
    """Queue ``address`` on the sending node has consumers with ``selectors`` (one per
    consumer, None for one without a selector, in a stable order), or topic ``address``
    has subscriptions with them; none at all if empty."""

    address: str
    selectors: tuple[str | None, ...]


class PeerPort(Protocol):
    """What the cluster's core needs of the links between nodes (the transport implements
    it). Each call sends one message on the link to ``peer``, in order; a link that is
    down drops it (the cluster resends what matters when the link comes up:
    :meth:`chute.core.rules.cluster.Cluster.link_up`)."""

    def send_handover(self, peer: str, handover: Handover) -> None:
        """Hand a message over. Sent only once every record the store was told so far is
        durable (the hand-over's record in the out ledger among them)."""

    def send_confirm(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        """The hand-overs ``keys`` are stored here. Sent only once every record the store
        was told so far is durable."""

    def send_refuse(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        """The hand-overs ``keys`` were not taken (their queue is full and refuses): the
        sender keeps them."""

    def send_release(self, peer: str, keys: KeyPairs) -> None:
        """The sender removed its copies of ``keys`` for good: the receiver may forget them.
        Sent only once every record the store was told so far is durable."""

    def send_resume(
        self, peer: str, keys: Sequence[HandoverKey], demands: Sequence[Demand]
    ) -> None:
        """Sent first on a link that came up: the only hand-overs this node may still
        send again (the receiver may forget every other key it holds from this node),
        and everything this node wants (every queue with consumers, every topic with
        subscriptions: what is not there, it no longer wants)."""

    def send_demand(self, peer: str, demand: Demand) -> None:
        """This node's consumers of a queue, or subscriptions of a topic, changed."""


def union_text(selectors: Sequence[str | None]) -> str | None:
    """One selector true where any of ``selectors`` is (None if one of them is None, which
    takes everything). ``selectors`` is not empty."""
    if any(s is None for s in selectors):
        return None
    texts = sorted({s for s in selectors if s is not None})
    if len(texts) == 1:
        return texts[0]
    return " OR ".join(f"({t})" for t in texts)


def union_selector(selectors: Sequence[str | None]) -> Selector | None:
    """:func:`union_text`, compiled.

    Raises:
        InvalidSelector: one of them is not a selector (a peer speaking nonsense).
    """
    text = union_text(selectors)
    return None if text is None else compile_selector(text)


class Ledger:
    """One ledger in the store: records numbered in its own sequence (resumed after a
    restart from what the store says), added and removed through the record sink it is
    given (the store, or a transaction's gathering: atomic with what goes with them)."""

    __slots__ = ("defined", "name", "next_seq")

    def __init__(self, name: str) -> None:
        self.name = name
        self.next_seq = 1
        self.defined = False

    def record(self, store: Store, message: Message) -> int:
        """Add a record; its number."""
        if not self.defined:
            store.define(QueueDefinition(self.name, QueueKind.LEDGER))
            self.defined = True
        seq = self.next_seq
        self.next_seq = seq + 1
        store.add(AddOp(self.name, (self.name,), seq, message))
        return seq

    def erase(self, store: Store, seq: int) -> None:
        store.ack(AckOp(self.name, seq))

    def erase_all(self, store: Store, seqs: Sequence[int]) -> None:
        """:meth:`erase` each of ``seqs``, in one call."""
        store.acks(self.name, seqs)


def out_record(handover: Handover, queue: str, seq: int) -> Message:
    """The out ledger's record of a hand-over of entry ``seq`` of ``queue`` (its store name)."""
    return Message(
        properties={
            "run": handover.key.run,
            "n": handover.key.n,
            "queue": queue,
            "seq": seq,
            "count": handover.delivery_count,
            "redelivered": handover.redelivered,
        }
    )


def in_record(keys: Sequence[HandoverKey]) -> Message:
    """The in ledger's record of hand-overs received and stored in one commit (``keys``,
    not empty): the first key's run and number, then the numbers of all, in the body."""
    first = keys[0]
    body = ""
    if len(keys) > 1:
        same = all(k.run == first.run for k in keys)
        body = " ".join(str(k.n) if same else f"{k.run}:{k.n}" for k in keys)
    return Message(body=body.encode(), properties={"run": first.run, "n": first.n})


def record_keys(record: Message) -> list[HandoverKey]:
    """The keys an in ledger's record names (:func:`in_record`)."""
    if not record.body:
        return [record_key(record)]
    text = record.body.decode()
    run = str(record.properties["run"])
    keys: list[HandoverKey] = []
    for word in text.split():
        other, _, n = word.rpartition(":")
        keys.append(HandoverKey(other or run, int(n)))
    return keys


def record_key(record: Message) -> HandoverKey:
    """The key a ledger's record names."""
    props = record.properties
    return HandoverKey(str(props["run"]), int(props["n"]))
