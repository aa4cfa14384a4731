"""Management: what an operator looks at and does to a running broker.

The admin surfaces (the HTTP API, the native protocol's admin requests) call
these functions; each takes the caller's core
:class:`~chute.core.connection.Connection` first, so that who may do what is
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

Moving messages (:func:`move`, :func:`retry_dead_letters`) and deleting one
(:func:`delete_message`) act on *waiting* messages only: a message in flight
to a consumer stays with it. They walk the source in sequence order a page at
a time (:mod:`chute.core.browse`, so paged-out messages are found in the
store), take a page's chosen messages out of the source
(``QueueChannel.withdraw_many``) and move each inside one
:meth:`~chute.core.broker.Broker.atomically` block: its add to the target and
its ack in the source reach the store as one atomic commit, so a crash leaves
each message in exactly one of the two. A moved message keeps its id,
priority, timestamp, expiration and properties; it gets a new sequence number
in the target and starts there undelivered. The target's overflow policy
applies: under ``reject`` or ``block`` a full target stops the move with
:class:`~chute.errors.DestinationFull` saying how many moved (the rest stay in
the source); under ``dead-letter`` and ``drop-oldest`` the policy does what it
does for any sender.

Used from the broker's loop only; one INFO log line per action, none per
message, none for looking.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from chute.core.access import Action
from chute.core.address import DEAD_LETTER, canonical, parse
from chute.core.broker import Broker
from chute.core.browse import PAGE_MESSAGES, browse_page
from chute.core.connection import Connection
from chute.core.consumer import Consumer, Entry
from chute.core.diversion import DIVERT_REASON, ORIGINAL_DESTINATION
from chute.core.queue import QueueChannel, as_delivered
from chute.core.queuetypes import LoginQueue
from chute.core.routing import Destination
from chute.core.selector import Selector, compile_selector
from chute.core.stats import queue_stats, topic_stats
from chute.core.topic import Subscription, SubscriptionKind, Topic
from chute.errors import AccessDenied, ChuteError, DestinationFull, InvalidAddress, NotFound
from chute.message import Message

log = logging.getLogger("chute.manage")

UNKNOWN_ORIGIN: Final = ""
"""The key under which :func:`retry_dead_letters` counts the dead letters it left in
place: no original destination recorded, or one that cannot take messages any more
(a temporary queue that is gone)."""

_BOOKKEEPING: Final = frozenset({ORIGINAL_DESTINATION, DIVERT_REASON})

# What decides where a withdrawn message goes: its target and the message to send
# there, or None to leave it in place.
_Where = Callable[[Entry], tuple[Destination, Message] | None]


# -- destinations ---------------------------------------------------------------------


def destination(conn: Connection, address: str) -> dict[str, Any]:
    """One destination's statistics (as :mod:`chute.core.stats` gives them: a topic with
    its ``subscriptions``), plus ``consumers_detail``: its consumers as
    :func:`consumers` lists them.

    Raises:
        AccessDenied, InvalidAddress; NotFound: it does not exist.
    """
    target = _authorize(conn, address)
    dest = _find(conn.broker, target)
    stats: dict[str, Any]
    if isinstance(dest, Topic):
        stats = topic_stats(dest)
        queues: list[QueueChannel] = list(dest.subscriptions.values())
    else:
        stats = {"address": dest.address, "kind": "queue", **queue_stats(dest)}
        stats["paged"] = dest.paged
        queues = [dest]
    stats["consumers_detail"] = _consumer_dicts(conn.broker, queues)
    return stats


def create(conn: Connection, address: str) -> bool:
    """Make a queue or topic; True if made, False if it existed. One an operator made
    is the broker's own, as a configured one: counted against no one's limit, never
    removed for being idle (it can be deleted).

    Raises:
        AccessDenied; InvalidAddress: a bad address, or a temporary queue's (its
        connection makes those).
    """
    target = _authorize(conn, address)
    if parse(target).is_temporary:
        raise InvalidAddress(f"{target}: temporary queues are made by their connection only")
    broker = conn.broker
    if broker.find(target) is not None:
        return False
    broker.destination(target, create=True)
    log.info("%s created %s", conn.principal, target)
    return True


# -- messages -------------------------------------------------------------------------


def move(
    conn: Connection,
    source: str,
    target: str,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
) -> int:
    """Move waiting messages of the queue ``source`` to ``target`` (a queue or a topic,
    which must exist), in sequence order, each atomically (see the module docstring);
    returns how many moved. Which: those numbered ``seqs`` (all waiting ones if None)
    that ``selector`` matches, at most ``limit`` (0: no limit).

    Raises:
        AccessDenied: no ``manage`` on either address. InvalidAddress: a bad address,
            ``source`` is a topic or is ``target``. InvalidSelector.
        NotFound: ``source`` or ``target`` does not exist.
        DestinationFull: ``target`` is full under ``reject`` or ``block``; the
            messages before moved (the message says how many), the rest stay.
    """
    source_address = _authorize(conn, source)
    target_address = _authorize(conn, target)
    if source_address == target_address:
        raise InvalidAddress(f"{source_address} is both source and target: name another target")
    broker = conn.broker
    queue = _queue(broker, source_address)
    dest = _find(broker, target_address)
    compiled = compile_selector(selector) if selector else None
    try:
        counts = _shift(
            broker,
            queue,
            lambda entry: (dest, entry.message),
            selector=compiled,
            seqs=seqs,
            limit=limit,
        )
    except ChuteError as exc:
        log.info("%s moving %s to %s stopped: %s", conn.principal, source_address, target, exc)
        raise
    moved = counts[target_address]
    log.info("%s moved %d messages from %s to %s", conn.principal, moved, source_address, target)
    return moved


def retry_dead_letters(
    conn: Connection,
    source: str = DEAD_LETTER,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
) -> dict[str, int]:
    """Send waiting dead letters of ``source`` back where each came from, in sequence
    order, each atomically (see the module docstring); returns how many went to each
    destination, and under :data:`UNKNOWN_ORIGIN` ("") how many stayed in ``source``
    for want of a known origin. Which: as :func:`move`.

    The origin is the address the dead-lettering recorded (``chute_original_destination``);
    a dead letter from a topic's subscription goes back to the topic, so every
    subscription of it gets it again. The message goes back as it was dead-lettered,
    without the ``chute_original_destination`` and ``chute_reason`` properties, never
    delivered. An origin deleted since is made again.

    Raises:
        AccessDenied: no ``manage`` on ``source``, or on an origin (the messages before
            went back: the message says how many). Others as :func:`move`.
    """
    source_address = _authorize(conn, source)
    broker = conn.broker
    queue = _queue(broker, source_address)
    compiled = compile_selector(selector) if selector else None
    origins: dict[str, Destination | None] = {}

    def where(entry: Entry) -> tuple[Destination, Message] | None:
        message = entry.message
        origin = message.properties.get(ORIGINAL_DESTINATION)
        if not isinstance(origin, str):
            return None
        if origin not in origins:
            origins[origin] = _origin(conn, origin, source_address)
        dest = origins[origin]
        if dest is None:
            return None
        kept = {k: v for k, v in message.properties.items() if k not in _BOOKKEEPING}
        return dest, message.replace(properties=kept, redelivered=False, delivery_count=0)

    try:
        counts = _shift(broker, queue, where, selector=compiled, seqs=seqs, limit=limit)
    except ChuteError as exc:
        log.info("%s retrying dead letters of %s stopped: %s", conn.principal, source_address, exc)
        raise
    log.info(
        "%s retried %d dead letters of %s (%s)",
        conn.principal,
        sum(n for to, n in counts.items() if to != UNKNOWN_ORIGIN),
        source_address,
        ", ".join(f"{to or 'left, origin unknown'}: {n}" for to, n in sorted(counts.items())),
    )
    return dict(counts)


def delete_message(conn: Connection, address: str, seq: int) -> None:
    """Delete the waiting message numbered ``seq`` of a queue (acked in the store, sent
    nowhere).

    Raises:
        AccessDenied, InvalidAddress; NotFound: no such queue, or no such message
        waiting (in flight to a consumer, or gone).
    """
    target = _authorize(conn, address)
    queue = _queue(conn.broker, target)
    taken = queue.withdraw_many((seq,))
    if not taken:
        raise NotFound(
            f"message {seq} is not waiting in {target}: it is in flight to a consumer "
            "(try again once it is settled or back) or gone"
        )
    queue.settle(taken[0], acked=False)
    log.info("%s deleted message %d (%s) of %s", conn.principal, seq, taken[0].message.id, target)


# -- connections, consumers, subscriptions, cursors ----------------------------------


def connections(conn: Connection) -> list[dict[str, Any]]:
    """Every client connection, in the order they connected: ``id``, ``protocol``,
    ``user`` (None: anonymous), ``peer``, ``client_id``, ``connected_at`` (ms since the
    epoch), ``sessions``, ``consumers`` and ``unacked`` (messages in flight to them).

    Raises:
        AccessDenied: the caller may not manage everything.
    """
    _authorize_all(conn, "list the connections")
    listed: list[dict[str, Any]] = []
    for client in conn.broker.connections.values():
        if not isinstance(client, Connection):
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
    conn: Connection, connection_id: str, reason: str = "closed by an operator"
) -> None:
    """Close a client's connection: its driver tells the client ``reason`` and ends the
    transport (``Connection.on_closed_by_broker``), and the core connection closes at
    once (in-flight messages go back, open transactions roll back).

    Raises:
        AccessDenied: the caller may not manage everything. NotFound: no such
        connection. ConsumerError: its driver refuses to be closed (a bridge, whose
        configuration decides its life).
    """
    _authorize_all(conn, "close connections")
    client = conn.broker.connections.get(connection_id)
    if client is None:
        raise NotFound(f"no connection {connection_id} (closed already?)")
    hook = client.on_closed_by_broker if isinstance(client, Connection) else None
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


def consumers(conn: Connection, address: str | None = None) -> list[dict[str, Any]]:
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
        dest = _find(broker, _authorize(conn, address))
        queues = list(dest.subscriptions.values()) if isinstance(dest, Topic) else [dest]
        return _consumer_dicts(broker, queues)
    every: list[QueueChannel] = list(broker.queues.values())
    every += broker.subscriptions.values()
    return _consumer_dicts(broker, [q for q in every if _manages(conn, q.address)])


def subscriptions(conn: Connection) -> list[dict[str, Any]]:
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


def cursors(conn: Connection) -> list[dict[str, Any]]:
    """Every cursor (the Spark source's readers): ``address``, ``name``, ``position``
    (the lowest sequence number it has not consumed: where its reader reads on),
    ``selector``, and ``lease``: ``held`` (it holds its queue now), ``lease_ms``,
    ``openers`` (ids of live connections that opened it), ``expires_at`` (ms since
    the epoch when it lets go, None while an opener is connected or once released).

    Raises:
        AccessDenied: the caller may not manage everything.
    """
    _authorize_all(conn, "list the cursors")
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


def _authorize(conn: Connection, address: str) -> str:
    """The canonical address, once ``conn`` may manage it (see the module docstring).

    Raises:
        InvalidAddress, AccessDenied.
    """
    target = canonical(address)
    if not conn.principal.manages_all:
        conn.authorize(Action.MANAGE, target)
    return target


def _manages(conn: Connection, address: str) -> bool:
    try:
        _authorize(conn, address)
    except (AccessDenied, NotFound):
        return False
    return True


def _authorize_all(conn: Connection, what: str) -> None:
    if not conn.principal.manages_all:
        raise AccessDenied(
            f"user {conn.principal} may not {what}: that needs manage on every "
            'destination (manage = ["*"] in one of their roles)'
        )


def _find(broker: Broker, address: str) -> Destination:
    dest = broker.find(address)
    if dest is None:
        raise NotFound(f"{address} does not exist")
    return dest


def _queue(broker: Broker, address: str) -> QueueChannel:
    dest = _find(broker, address)
    if isinstance(dest, Topic):
        raise InvalidAddress(
            f"{address} is a topic: it holds no messages (its subscriptions do, for their "
            "consumers)"
        )
    return dest


def _origin(conn: Connection, origin: str, source: str) -> Destination | None:
    """Where a dead letter goes back to (None: nowhere known); raises AccessDenied
    unless ``conn`` may manage it."""
    try:
        address = canonical(origin)
    except InvalidAddress:
        return None
    if address == source:
        return None
    _authorize(conn, address)
    try:
        return conn.broker.destination(address, create=True)
    except (InvalidAddress, NotFound):  # a temporary queue that is gone
        return None


def _batches(
    queue: QueueChannel, selector: Selector | None, seqs: Sequence[int] | None
) -> Iterator[list[int]]:
    """Sequence numbers to try, ascending, a page at a time: ``seqs``, or the ones a
    walk over ``queue`` finds that ``selector`` matches (in flight ones too: taking
    them out skips them)."""
    if seqs is not None:
        ordered = sorted(set(seqs))
        for i in range(0, len(ordered), PAGE_MESSAGES):
            yield ordered[i : i + PAGE_MESSAGES]
        return
    after = before = 0
    while True:
        page = browse_page(queue, after, before, selector=selector)
        if page.entries:
            yield [entry.seq for entry in page.entries]
        if page.done:
            return
        after, before = page.after, page.before


def _shift(
    broker: Broker,
    queue: QueueChannel,
    where: _Where,
    *,
    selector: Selector | None,
    seqs: Sequence[int] | None,
    limit: int,
) -> Counter[str]:
    """Move the chosen waiting messages of ``queue`` where ``where`` says, each with one
    atomic store commit; how many went to each address (:data:`UNKNOWN_ORIGIN`: left).

    Raises:
        DestinationFull, AccessDenied: a target refused (the messages before went).
    """
    counts: Counter[str] = Counter()
    moved = 0
    for batch in _batches(queue, selector, seqs):
        entries = queue.withdraw_many(batch)
        if seqs is not None and selector is not None:
            entries = _matching(queue, entries, selector)
        if limit > 0 and moved + len(entries) > limit:
            queue.put_back(entries[limit - moved :])
            del entries[limit - moved :]
        left: list[Entry] = []
        error: ChuteError | None = None
        tried = 0
        try:
            with broker.atomically():
                for entry in entries:
                    found = where(entry)
                    if found is None:
                        left.append(entry)
                        counts[UNKNOWN_ORIGIN] += 1
                    else:
                        dest, message = found
                        route = broker.route(dest, message)  # raises before placing anything
                        if route.record is not None:
                            broker.store.add(route.record)
                        broker.place(route)
                        queue.settle(entry, acked=False)
                        counts[dest.address] += 1
                        moved += 1
                    tried += 1
        except (DestinationFull, AccessDenied) as exc:
            error = exc
        finally:
            if left or tried < len(entries):  # what is not moved goes back as it was
                queue.put_back(left + entries[tried:])
        if error is not None:
            done = sum(n for to, n in counts.items() if to != UNKNOWN_ORIGIN)
            cls = AccessDenied if isinstance(error, AccessDenied) else DestinationFull
            raise cls(
                f"{error.reason}; {done} messages had moved before, the rest stay in "
                f"{queue.address}"
            ) from error
        if limit > 0 and moved >= limit:
            break
    return counts


def _matching(queue: QueueChannel, entries: list[Entry], selector: Selector) -> list[Entry]:
    """The entries ``selector`` matches; the others go back."""
    chosen = [e for e in entries if selector.matches(as_delivered(e))]
    if len(chosen) < len(entries):
        queue.put_back([e for e in entries if e not in chosen])
    return chosen


def _consumer_dicts(broker: Broker, queues: Sequence[QueueChannel]) -> list[dict[str, Any]]:
    owners: dict[int, str] = {}
    for client in broker.connections.values():
        if isinstance(client, Connection):
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


def _consumer_dict(queue: QueueChannel, consumer: Consumer, owner: str | None) -> dict[str, Any]:
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
