"""``chute move`` and ``chute dlq retry``: moving waiting messages on a broker.

``chute move SRC DEST`` moves the messages waiting in queue SRC to DEST;
``chute dlq retry`` sends dead letters back to the destination each came from
(``chute_original_destination``). Both ask the broker in pages of
:data:`PAGE` messages, each page one request (so one request never holds the
broker long, and a terminal shows progress on standard error), and stop when a
page comes back short (nothing that matches waits any more, paged to disk or
not), at ``--limit``, or once as many moved as waited when they began (so
producers that keep filling SRC cannot keep them going forever). Each message
moves atomically, in sequence order; messages in flight to consumers stay
where they are.

What they print: one line (``moved 12 messages from queue:a to queue:b``), and
for a retry a line per destination (and how many stayed for want of a known
origin); then, without ``--limit``, what they left in SRC and why (messages
that arrived after they began, messages in flight to consumers). With
``--json`` one JSON object instead, with ``remaining`` (waiting in SRC after)
and ``in_flight``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from chute.cli.message import UsageError, whole
from chute.cli.progress import Progress
from chute.core.model.address import DEAD_LETTER, canonical
from chute.errors import ChuteError

PAGE: Final = 1000
"""Messages one request moves at most."""

UNKNOWN_ORIGIN: Final = ""
"""The key under which a retry counts the dead letters it left in place."""

Connect = Callable[[argparse.Namespace], Any]
"""Opens the connection the command's arguments name (``chute.cli``'s)."""


def add_move_commands(
    sub: Any, client_args: Callable[[argparse.ArgumentParser], None], connect: Connect
) -> None:
    """Register ``chute move`` and ``chute dlq retry``."""
    move = sub.add_parser(
        "move",
        help="move the messages waiting in a queue to another destination",
        description="Move the messages waiting in queue SRC (those --selector matches, at "
        "most --limit) to DEST, a queue or a topic, in sequence order; messages in flight to "
        "consumers stay. On a terminal, standard error shows progress.",
    )
    move.add_argument("source", metavar="SRC", help="the queue to take messages from")
    move.add_argument("target", metavar="DEST", help="where they go: queue:NAME or topic:NAME")
    _picking(move)
    client_args(move)
    move.set_defaults(func=lambda args: _move(args, connect))

    dlq = sub.add_parser("dlq", help="dead letters: send them back where they came from")
    commands = dlq.add_subparsers(dest="dlq_command", metavar="COMMAND", required=True)
    retry = commands.add_parser(
        "retry",
        help="send dead letters back to their original destinations",
        description="Send the messages waiting in a dead-letter queue (those --selector "
        "matches, at most --limit) back to the destination each came from, and print how "
        "many went to each.",
    )
    retry.add_argument(
        "--from",
        dest="source",
        default=DEAD_LETTER,
        metavar="QUEUE",
        help=f"the dead-letter queue (default {DEAD_LETTER})",
    )
    _picking(retry)
    client_args(retry)
    retry.set_defaults(func=lambda args: _retry(args, connect))


def _picking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--selector", help="only the messages this JMS selector matches, e.g. \"region = 'eu'\""
    )
    parser.add_argument("--limit", type=whole(), default=0, help="at most this many (0 = all)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _move(args: argparse.Namespace, connect: Connect) -> int:
    source, target = _address(args.source), _address(args.target)
    if source == target:
        raise UsageError(f"cannot move {source} to itself: name another destination")
    with connect(args) as conn:

        def page(limit: int) -> int:
            moved: int = conn.move(source, target, selector=args.selector, limit=limit)
            return moved

        moved, bounded = _in_pages(conn, source, args.limit, page)
        remaining, in_flight = _left(conn, source)
    if args.json:
        print(
            json.dumps(
                {
                    "from": source,
                    "to": target,
                    "moved": moved,
                    "remaining": remaining,
                    "in_flight": in_flight,
                }
            )
        )
        return 0
    print(f"moved {_messages(moved)} from {source} to {target}")
    _say_left(args, source, remaining, in_flight, bounded)
    return 0


def _retry(args: argparse.Namespace, connect: Connect) -> int:
    source = _address(args.source)
    counts: Counter[str] = Counter()
    with connect(args) as conn:
        left = 0  # each page walks the queue from its start: the last page's count

        def page(limit: int) -> int:
            nonlocal left
            retried: dict[str, int] = conn.retry_dead_letters(
                source, selector=args.selector, limit=limit
            )
            left = retried.pop(UNKNOWN_ORIGIN, 0)
            counts.update(retried)
            return sum(retried.values())

        total, bounded = _in_pages(conn, source, args.limit, page)
        remaining, in_flight = _left(conn, source)
    to = dict(sorted(counts.items()))
    if args.json:
        print(
            json.dumps(
                {
                    "from": source,
                    "retried": total,
                    "to": to,
                    "left": left,
                    "remaining": remaining,
                    "in_flight": in_flight,
                }
            )
        )
        return 0
    print(f"retried {_messages(total)} from {source}")
    width = max((len(d) for d in to), default=0)
    for destination, n in to.items():
        print(f"  {destination.ljust(width)}  {n:>{len(f'{total:,}')},}")
    if left:
        print(f"left {_messages(left)} in {source}: where they came from is not known")
    _say_left(args, source, remaining - left, in_flight, bounded)
    return 0


def _in_pages(conn: Any, source: str, limit: int, page: Callable[[int], int]) -> tuple[int, bool]:
    """Call ``page(n)`` (which moves at most n messages and says how many it did) until
    a page comes back short (nothing waiting matches any more), ``limit`` moved, or as
    many as waited at the start (then the second value is True: producers kept
    filling ``source``); how many moved."""
    waiting, _ = _left(conn, source)
    progress = Progress(sys.stderr, source, min(waiting, limit) if limit else waiting)
    done = 0
    try:
        while True:
            asked = min(PAGE, limit - done) if limit else PAGE
            moved = page(asked)
            done += moved
            progress.advance(moved)
            if moved < asked or (limit and done >= limit):
                return done, False
            if not limit and done >= waiting:
                return done, True
    finally:
        progress.close()


def _left(conn: Any, source: str) -> tuple[int, int]:
    """How many messages wait in ``source`` now, in memory or paged to disk, and how many
    are in flight to consumers (0, 0 if the broker does not list it: a page then says
    why)."""
    found = conn.stat(source)["destinations"]
    if not found:
        return 0, 0
    row: dict[str, Any] = found[0]
    in_flight = int(row.get("inflight", 0))
    return int(row.get("depth", 0)) - in_flight, in_flight


def _say_left(
    args: argparse.Namespace, source: str, remaining: int, in_flight: int, bounded: bool
) -> None:
    """Say what a move or retry without ``--limit`` left in ``source``, and why."""
    if args.limit:
        return
    if remaining > 0 and not args.selector:
        print(
            f"left {_messages(remaining)} waiting in {source}: "
            f"{'they' if remaining > 1 else 'it'} arrived after the move began "
            "(run it again to move them)"
        )
    elif bounded and remaining > 0:
        print(
            f"stopped once as many had moved as waited in {source} when it began: "
            "run it again for those that arrived since"
        )
    if in_flight:
        print(
            f"left {_messages(in_flight)} in {source} in flight to consumers: "
            "they stay with them (run it again once they come back)"
        )


def _address(text: str) -> str:
    try:
        return canonical(text)
    except ChuteError as exc:
        raise UsageError(exc.reason) from None


def _messages(count: int) -> str:
    return f"{count:,} message" if count == 1 else f"{count:,} messages"


def add_create_command(
    sub: Any, client_args: Callable[[argparse.ArgumentParser], None], connect: Connect
) -> None:
    """Register ``chute create``: make a queue, topic or stream on a broker. It prints
    ``created queue:x`` (or ``queue:x exists already``, also status 0); with ``--json``
    ``{"address": ..., "created": true|false}``."""
    create = sub.add_parser(
        "create",
        help="make a queue, topic or stream (before anyone uses it)",
        description="Make ADDRESS (queue:NAME, topic:NAME, stream:NAME; a bare NAME is a "
        "queue) on the broker, so that it exists before its first send or consumer. Needs "
        "the manage permission on it; one made by a user who manages only some addresses "
        "counts against their max_destinations_per_user. An existing one is left as it is.",
    )
    create.add_argument("address", metavar="ADDRESS", help="queue:NAME, topic:NAME or stream:NAME")
    create.add_argument(
        "--json", action="store_true", help='print {"address": ..., "created": ...}'
    )
    client_args(create)
    create.set_defaults(func=lambda args: _create(args, connect))


def _create(args: argparse.Namespace, connect: Connect) -> int:
    address = _address(args.address)
    with connect(args) as conn:
        created = bool(conn.create(address))
    if args.json:
        print(json.dumps({"address": address, "created": created}))
    else:
        print(f"created {address}" if created else f"{address} exists already")
    return 0
