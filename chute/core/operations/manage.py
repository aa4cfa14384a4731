"""Management: what an operator looks at and does to a running broker.

The admin surfaces (the HTTP API, the native protocol's admin requests) call
these functions; each takes the caller's core
:class:`~chute.core.operations.connection.BrokerConnection` first, so that who may do what is
decided here, once, for every surface. Every function answers JSON-ready
values (dicts, lists, ints, strings).

Who may:

* An operation on a destination needs ``manage`` on its address. A user who
  may manage everything (``manage = ["*"]``, the ``admin`` role, or everybody
  when no users are configured) manages every destination, the reserved ones
  (dead letters, expired, temporary and login-name queues) included; anyone
  else needs a grant that reaches the address (``manage = ["queue:__sys__*"]``
  for the dead letters: a wildcard never reaches a reserved name).
* :func:`connections`, :func:`close_connection` and :func:`cursors` concern
  everybody's work: they need ``manage = ["*"]``.
* :func:`consumers` (without an address) and :func:`subscriptions` list only
  what is on destinations the caller manages.

Moving messages between destinations (and deleting one) is in
:mod:`chute.core.operations.transfer`, which checks who may with this module's
:func:`authorized`.

Used from the broker's loop only; one INFO log line per action, none per
message, none for looking.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from chute.core.model.address import canonical, parse
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.queuetypes import LoginQueue
from chute.core.model.registry import Destination
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.stats import queue_stats, stream_stats, topic_stats
from chute.core.rules.access import Action
from chute.core.rules.broker import Broker
from chute.core.rules.destinations import ANONYMOUS
from chute.errors import AccessDenied, InvalidAddress, NotFound

log = logging.getLogger("chute.manage")


# -- destinations ---------------------------------------------------------------------


def destination(conn: BrokerConnection, address: str) -> dict[str, Any]:
    """One destination's statistics (as :mod:`chute.core.operations.stats` gives them: a topic with
    its ``subscriptions``), plus ``consumers_detail``: its consumers as
    :func:`consumers` lists them.

    Raises:
        AccessDenied, InvalidAddress; NotFound: it does not exist.
    """
    target = authorized(conn, address)
    dest = find(conn.broker, target)
    stats: dict[str, Any]
    if isinstance(dest, Topic):
        stats = topic_stats(dest)
        queues: list[QueueChannel] = list(dest.subscriptions.values())
    elif isinstance(dest, Stream):
        stats = stream_stats(dest)
        queues = list(dest.readers)
    else:
        stats = {"address": dest.address, "kind": "queue", **queue_stats(dest)}
        stats["paged"] = dest.paged
        queues = [dest]
    stats["consumers_detail"] = _consumer_dicts(conn.broker, queues)
    return stats


def create(conn: BrokerConnection, address: str) -> bool:
    """Make a queue, topic or stream; True if made, False if it existed. One an operator
    who manages everything made is the broker's own, as a configured one: counted
    against no one's limit, never removed for being idle (it can be deleted). One a
    user who manages only some addresses made counts as theirs, as if they had made
    it by use: against ``max_destinations`` and their ``max_destinations_per_user``
    (:meth:`Destinations.admit <chute.core.rules.destinations.Destinations.admit>`).

    Raises:
        AccessDenied; InvalidAddress: a bad address, or a temporary queue's (its
        connection makes those); DestinationFull: past a limit on what users make.
    """
    target = authorized(conn, address)
    if parse(target).is_temporary:
        raise InvalidAddress(f"{target}: temporary queues are made by their connection only")
    broker = conn.broker
    if broker.find(target) is not None:
        return False
    if conn.principal.manages_all:
        broker.destination(target, create=True)
    else:
        maker = conn.owner_name or ANONYMOUS
        broker.destinations.admit(target, maker)
        broker.destination(target, create=True, maker=maker)
        broker.destinations.note_made(target, maker)
    log.info("%s created %s", conn.principal, target)
    return True


# -- messages -------------------------------------------------------------------------


MAX_TAKE = 100
"""The most messages one :func:`take` takes."""


class _Taken:
    """A receiver that keeps what it is given, as delivered (its delivery fields then)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.entries.append(
            Entry(entry.seq, entry.message, entry.delivery_count, entry.redelivered)
        )


def take(conn: BrokerConnection, address: str, count: int, *, requeue: bool = False) -> list[Entry]:
    """Take up to ``count`` (at most :data:`MAX_TAKE`) waiting messages of a queue as a
    consumer would, in delivery order (RabbitMQ's "get messages"): each is then
    acknowledged (gone from the queue) or, with ``requeue``, given back (it stays,
    marked redelivered, its delivery count up). Messages in flight to consumers stay
    with them; while an exclusive consumer is attached, it alone receives (nothing is
    taken). Needs ``manage`` and ``consume`` on the address. Returns the messages as
    they were delivered.

    Raises:
        AccessDenied, InvalidAddress (a topic or a stream: browse those); NotFound.
    """
    target = authorized(conn, address)
    find_queue(conn.broker, target)
    session = conn.session(AckMode.INDIVIDUAL)
    taken = _Taken()
    try:
        consumer = session.consumer(0, target, taken, prefetch=max(1, min(count, MAX_TAKE)))
        for entry in list(taken.entries):  # its credit is spent: nothing more comes
            if requeue:
                session.nack(consumer, entry.seq, requeue=True)
            else:
                session.ack(consumer, entry.seq)
    finally:
        session.close()
    if taken.entries:
        log.info(
            "%s took %d messages from %s%s",
            conn.principal,
            len(taken.entries),
            target,
            " and gave them back" if requeue else "",
        )
    return taken.entries


# -- connections, consumers, subscriptions, cursors ----------------------------------


def connections(conn: BrokerConnection) -> list[dict[str, Any]]:
    """Every client connection, in the order they connected: ``id``, ``protocol``,
    ``user`` (None: anonymous), ``peer``, ``client_id``, ``connected_at`` (ms since the
    epoch), ``sessions``, ``consumers`` and ``unacked`` (messages in flight to them).

    Raises:
        AccessDenied: the caller may not manage everything.
    """
    authorize_all(conn, "list the connections")
    listed: list[dict[str, Any]] = []
    for client in conn.broker.connections.values():
        if not isinstance(client, BrokerConnection):
            continue
        opened = [c for s in client.sessions for c in s.consumers.values()]
        listed.append(
            {
                "id": client.id,
                "protocol": client.protocol,
                "user": client.login,
                "peer": client.peer,
                "client_id": client.client_id,
                "connected_at": client.connected_at,
                "sessions": len(client.sessions),
                "consumers": len(opened),
                "unacked": sum(len(c.inflight) for c in opened),
            }
        )
    return listed


def close_connection(
    conn: BrokerConnection, connection_id: str, reason: str = "closed by an operator"
) -> None:
    """Close a client's connection: its driver tells the client ``reason`` and ends the
    transport (``BrokerConnection.on_closed_by_broker``), and the core connection closes at
    once (in-flight messages go back, open transactions roll back).

    Raises:
        AccessDenied: the caller may not manage everything. NotFound: no such
        connection. ConsumerError: its driver refuses to be closed (a bridge, whose
        configuration decides its life).
    """
    authorize_all(conn, "close connections")
    client = conn.broker.connections.get(connection_id)
    if client is None:
        raise NotFound(f"no connection {connection_id} (closed already?)")
    hook = client.on_closed_by_broker if isinstance(client, BrokerConnection) else None
    if hook is not None:
        hook(reason)
    client.close()
    log.info(
        "%s closed connection %s (user=%s): %s",
        conn.principal,
        connection_id,
        client.principal,
        reason,
    )


def consumers(conn: BrokerConnection, address: str | None = None) -> list[dict[str, Any]]:
    """The consumers of a destination (a topic's: of every subscription), or of every
    destination the caller manages: ``connection`` (None: a part of the broker, as a
    callback queue's forwarder or a cursor), ``id``, ``address``, ``subscription``,
    ``ack_mode``, ``selector``, ``prefetch``, ``credit``, ``exclusive``, ``unacked``,
    ``delivered``.

    Raises:
        AccessDenied, InvalidAddress, NotFound: as :func:`destination` (with an address).
    """
    broker = conn.broker
    if address is not None:
        dest = find(broker, authorized(conn, address))
        queues: list[QueueChannel]
        if isinstance(dest, Topic):
            queues = list(dest.subscriptions.values())
        elif isinstance(dest, Stream):
            queues = list(dest.readers)
        else:
            queues = [dest]
        return _consumer_dicts(broker, queues)
    every: list[QueueChannel] = list(broker.queues.values())
    every += broker.subscriptions.values()
    for stream in broker.streams.values():
        every += stream.readers
    return _consumer_dicts(broker, [q for q in every if _manages(conn, q.address)])


def subscriptions(conn: BrokerConnection) -> list[dict[str, Any]]:
    """The durable subscriptions (callback queues and topic cursors' included) of the
    topics the caller manages: ``topic``, ``name``, ``client_id``, ``kind``
    (``durable``, ``durable-shared``, ``callback``, ``cursor``), ``selector``,
    ``forward_to``, ``owner``, ``depth``, ``ready``, ``inflight``, ``consumers``."""
    listed: list[dict[str, Any]] = []
    for sub in conn.broker.subscriptions.values():
        if sub.kind not in (SubscriptionKind.DURABLE, SubscriptionKind.CALLBACK):
            continue
        if not _manages(conn, sub.address):
            continue
        kind, client_id, name = _subscription_names(sub)
        listed.append(
            {
                "topic": sub.address,
                "name": name,
                "client_id": client_id,
                "kind": kind,
                "selector": sub.selector_text,
                "forward_to": sub.forward_to,
                "owner": sub.owner,
                "depth": sub.held,
                "ready": sub.ready,
                "inflight": sub.inflight,
                "consumers": len(sub.router.consumers),
            }
        )
    return listed


def cursors(conn: BrokerConnection) -> list[dict[str, Any]]:
    """Every cursor (the Spark source's readers): ``address``, ``name``, ``position``
    (the lowest sequence number it has not consumed: where its reader reads on),
    ``selector``, and ``lease``: ``held`` (it holds its queue now), ``lease_ms``,
    ``openers`` (ids of live connections that opened it), ``expires_at`` (ms since
    the epoch when it lets go, None while an opener is connected or once released).

    Raises:
        AccessDenied: the caller may not manage everything.
    """
    authorize_all(conn, "list the cursors")
    broker = conn.broker
    listed: list[dict[str, Any]] = []
    for cursor in broker.cursors.all():
        openers = sorted(o for o in cursor.openers if o in broker.connections)
        held = cursor.held
        expires = cursor.last_seen + cursor.lease_ms if held and not openers else None
        listed.append(
            {
                "address": cursor.address,
                "name": cursor.name,
                "position": broker.cursors.earliest(cursor.queue),
                "selector": cursor.selector.text if cursor.selector is not None else None,
                "lease": {
                    "held": held,
                    "lease_ms": cursor.lease_ms,
                    "openers": openers,
                    "expires_at": expires,
                },
            }
        )
    return listed


# -- helpers --------------------------------------------------------------------------


def authorized(conn: BrokerConnection, address: str) -> str:
    """The canonical address, once ``conn`` may manage it (see the module docstring).

    Raises:
        InvalidAddress, AccessDenied.
    """
    target = canonical(address)
    if not conn.principal.manages_all:
        conn.authorize(Action.MANAGE, target)
    return target


def _manages(conn: BrokerConnection, address: str) -> bool:
    try:
        authorized(conn, address)
    except (AccessDenied, NotFound):
        return False
    return True


def authorize_all(conn: BrokerConnection, what: str) -> None:
    if not conn.principal.manages_all:
        raise AccessDenied(
            f"user {conn.principal} may not {what}: that needs manage on every "
            'destination (manage = ["*"] in one of their roles)'
        )


def find(broker: Broker, address: str) -> Destination:
    dest = broker.find(address)
    if dest is None:
        raise NotFound(f"{address} does not exist")
    return dest


def find_queue(broker: Broker, address: str) -> QueueChannel:
    dest = find(broker, address)
    if isinstance(dest, Topic):
        raise InvalidAddress(
            f"{address} is a topic: it holds no messages (its subscriptions do, for their "
            "consumers)"
        )
    if isinstance(dest, Stream):
        raise InvalidAddress(
            f"{address} is a stream: its messages leave by retention only (purge it, or delete it)"
        )
    return dest


def _consumer_dicts(broker: Broker, queues: Sequence[QueueChannel]) -> list[dict[str, Any]]:
    owners: dict[int, str] = {}
    for client in broker.connections.values():
        if isinstance(client, BrokerConnection):
            for session in client.sessions:
                for consumer in session.consumers.values():
                    owners[id(consumer)] = client.id
    listed: list[dict[str, Any]] = []
    for queue in queues:
        channels = [queue, *queue.pipes.values()] if isinstance(queue, LoginQueue) else [queue]
        for channel in channels:
            listed += [
                _consumer_dict(channel, c, owners.get(id(c))) for c in channel.router.consumers
            ]
    return listed


def _consumer_dict(
    queue: QueueChannel, consumer: BrokerConsumer, owner: str | None
) -> dict[str, Any]:
    sub = queue if isinstance(queue, Subscription) else None
    selector = consumer.selector.text if consumer.selector is not None else None
    return {
        "connection": owner,
        "id": consumer.id,
        "address": queue.address,
        "subscription": (_subscription_names(sub)[2] if sub is not None else None),
        "ack_mode": consumer.ack_mode.value,
        "selector": sub.selector_text if sub is not None else selector,
        "prefetch": consumer.prefetch,
        "credit": consumer.credit,
        "exclusive": consumer.exclusive,
        "unacked": len(consumer.inflight),
        "delivered": consumer.delivered,
    }


def _subscription_names(sub: Subscription) -> tuple[str, str | None, str]:
    """``(kind, client_id, name)`` of a subscription, from its kind and store key (a
    restored subscription knows no more)."""
    key = sub.name
    prefix, _, rest = key.partition(":")
    name = sub.subscription_name
    if prefix == "durable":
        if name and rest.endswith("." + name):
            return "durable", rest[: -len(name) - 1], name
        client_id, _, name = rest.rpartition(".")
        return "durable", client_id or None, name
    if prefix == "cursor":
        return "cursor", None, rest.removeprefix(sub.address + ".")
    if prefix in ("durable-shared", "callback"):
        return prefix, None, rest
    return sub.kind.value, None, name or key
