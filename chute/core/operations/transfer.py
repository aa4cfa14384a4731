"""Moving messages: to another destination, back from the dead letters, or away.

Moving messages (:func:`move`, :func:`retry_dead_letters`) and deleting one
(:func:`delete_message`), each needing ``manage`` on every address it touches
(:func:`chute.core.operations.manage.authorized`), act on *waiting* messages only: a
message in flight to a consumer stays with it. They walk the source in
sequence order a few at a time (:mod:`chute.core.operations.browse`, so paged-out
messages are found in the store), take the chosen messages out of the source
(``QueueChannel.withdraw_many``) and move each inside one
:meth:`~chute.core.rules.broker.Broker.atomically` block: its add to the target and
its ack in the source reach the store as one atomic commit, so a crash leaves
each message in exactly one of the two. A moved message keeps its id,
priority, timestamp, expiration and properties; it gets a new sequence number
in the target and starts there undelivered. The target's overflow policy
applies: under ``reject`` or ``block`` a full target stops the move with
:class:`~chute.errors.DestinationFull` saying how many moved (the rest stay in
the source); under ``dead-letter`` and ``drop-oldest`` the policy does what it
does for any sender.

Moving is done in steps (:func:`move_steps`, :func:`retry_steps`: generators
that move at most :data:`STEP` messages per ``next()``), so that a driver
interleaves a move of a deep queue with other clients' work;
:func:`move` and :func:`retry_dead_letters` take every step at once.

Used from the broker's loop only; one INFO log line per action, none per
message.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Final, TypeVar

from chute.core.model.address import DEAD_LETTER, canonical
from chute.core.model.consumer import Entry, as_delivered
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Destination
from chute.core.model.selector import Selector, compile_selector
from chute.core.operations.browse import browse_page
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.manage import authorized, create, find, find_queue
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION
from chute.errors import AccessDenied, ChuteError, DestinationFull, InvalidAddress, NotFound
from chute.message import Message

log = logging.getLogger("chute.manage")


UNKNOWN_ORIGIN: Final = ""
"""The key under which :func:`retry_dead_letters` counts the dead letters it left in
place: no original destination recorded, or one that cannot take messages any more
(a temporary queue that is gone)."""


STEP: Final = 64
"""The most messages :func:`move_steps` and :func:`retry_steps` move in one step: a
driver takes a step at a time between other clients' work, so moving a deep queue
never holds the loop for long."""


_T = TypeVar("_T")


_BOOKKEEPING: Final = frozenset({ORIGINAL_DESTINATION, DIVERT_REASON})


# What decides where a withdrawn message goes: its target and the message to send
# there, or None to leave it in place.
_Where = Callable[[Entry], tuple[Destination, Message] | None]


def move(
    conn: BrokerConnection,
    source: str,
    target: str,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
) -> int:
    """:func:`move_steps` at once (for tests and in-process use)."""
    return run_steps(move_steps(conn, source, target, selector=selector, seqs=seqs, limit=limit))


def move_steps(
    conn: BrokerConnection,
    source: str,
    target: str,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
    tally: Counter[str] | None = None,
) -> Generator[None, None, int]:
    """Move waiting messages of the queue ``source`` to ``target`` (a queue or a topic,
    made as :func:`~chute.core.operations.manage.create` makes one if it does not exist yet, as a
    send would make it), in sequence order, each atomically (see the module docstring);
    returns how many moved. Which: those numbered ``seqs`` (all waiting ones if None)
    that ``selector`` matches, at most ``limit`` (0: no limit). ``tally``, if given,
    counts them as they move, under the target's address (a driver shows it as
    progress).

    Raises:
        AccessDenied: no ``manage`` on either address. InvalidAddress: a bad address,
            ``source`` is a topic or is ``target``. InvalidSelector.
        NotFound: ``source`` does not exist.
        DestinationFull: making ``target`` would pass a limit on made destinations;
            ``target`` is full under ``reject`` or ``block``; the
            messages before moved (the message says how many), the rest stay.
    """
    source_address = authorized(conn, source)
    target_address = authorized(conn, target)
    if source_address == target_address:
        raise InvalidAddress(f"{source_address} is both source and target: name another target")
    broker = conn.broker
    queue = find_queue(broker, source_address)
    compiled = compile_selector(selector) if selector else None
    create(conn, target_address)
    dest = find(broker, target_address)
    try:
        counts = yield from _shift(
            broker,
            queue,
            lambda entry: (dest, entry.message),
            selector=compiled,
            seqs=seqs,
            limit=limit,
            counts=tally,
        )
    except ChuteError as exc:
        log.info("%s moving %s to %s stopped: %s", conn.principal, source_address, target, exc)
        raise
    moved = counts[target_address]
    log.info("%s moved %d messages from %s to %s", conn.principal, moved, source_address, target)
    return moved


def retry_dead_letters(
    conn: BrokerConnection,
    source: str = DEAD_LETTER,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
) -> dict[str, int]:
    """:func:`retry_steps` at once (for tests and in-process use)."""
    return run_steps(retry_steps(conn, source, selector=selector, seqs=seqs, limit=limit))


def retry_steps(
    conn: BrokerConnection,
    source: str = DEAD_LETTER,
    *,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
    tally: Counter[str] | None = None,
) -> Generator[None, None, dict[str, int]]:
    """Send waiting dead letters of ``source`` back where each came from, in sequence
    order, each atomically (see the module docstring); returns how many went to each
    destination, and under :data:`UNKNOWN_ORIGIN` ("") how many stayed in ``source``
    for want of a known origin. Which: as :func:`move`. ``tally``, if given, counts
    them so as they go.

    The origin is the address the dead-lettering recorded (``chute_original_destination``);
    a dead letter from a topic's subscription goes back to the topic, so every
    subscription of it gets it again. The message goes back as it was dead-lettered,
    without the ``chute_original_destination`` and ``chute_reason`` properties, never
    delivered. An origin deleted since is made again.

    Raises:
        AccessDenied: no ``manage`` on ``source``, or on an origin (the messages before
            went back: the message says how many). Others as :func:`move`.
    """
    source_address = authorized(conn, source)
    broker = conn.broker
    queue = find_queue(broker, source_address)
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
        counts = yield from _shift(
            broker, queue, where, selector=compiled, seqs=seqs, limit=limit, counts=tally
        )
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


def delete_message(conn: BrokerConnection, address: str, seq: int) -> None:
    """Delete the waiting message numbered ``seq`` of a queue (acked in the store, sent
    nowhere).

    Raises:
        AccessDenied, InvalidAddress; NotFound: no such queue, or no such message
        waiting (in flight to a consumer, or gone).
    """
    target = authorized(conn, address)
    queue = find_queue(conn.broker, target)
    taken = queue.withdraw_many((seq,))
    if not taken:
        raise NotFound(
            f"message {seq} is not waiting in {target}: it is in flight to a consumer "
            "(try again once it is settled or back) or gone"
        )
    queue.settle(taken[0], acked=False)
    log.info("%s deleted message %d (%s) of %s", conn.principal, seq, taken[0].message.id, target)


def _origin(conn: BrokerConnection, origin: str, source: str) -> Destination | None:
    """Where a dead letter goes back to (None: nowhere known); raises AccessDenied
    unless ``conn`` may manage it."""
    try:
        address = canonical(origin)
    except InvalidAddress:
        return None
    if address == source:
        return None
    authorized(conn, address)
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
        for i in range(0, len(ordered), STEP):
            yield ordered[i : i + STEP]
        return
    after = before = 0
    while True:
        page = browse_page(queue, after, before, max_messages=STEP, selector=selector)
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
    counts: Counter[str] | None,
) -> Generator[None, None, Counter[str]]:
    """Move the chosen waiting messages of ``queue`` where ``where`` says, each with one
    atomic store commit, a step of at most :data:`STEP` at a time; how many went to each
    address (:data:`UNKNOWN_ORIGIN`: left), counted in ``counts`` if given.

    Raises:
        DestinationFull, AccessDenied: a target refused (the messages before went).
    """
    if counts is None:
        counts = Counter()
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
        yield
    return counts


def run_steps(steps: Generator[None, None, _T]) -> _T:
    """Take every step of ``steps`` at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result


def _matching(queue: QueueChannel, entries: list[Entry], selector: Selector) -> list[Entry]:
    """The entries ``selector`` matches; the others go back."""
    chosen = [e for e in entries if selector.matches(as_delivered(e))]
    if len(chosen) < len(entries):
        queue.put_back([e for e in entries if e not in chosen])
    return chosen
