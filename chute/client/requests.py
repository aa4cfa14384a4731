"""The client's requests that need no session state: each a packet and its answer's parser.

A :class:`Request` pairs the packet to send with what its answer means, so a
driver never pairs a builder with a parser by hand::

    page = conn.call(requests.browse_fetch("queue:orders"))     # packets.BrowsePage
    stats, after = await conn.call(requests.stat_fetch())        # one page of stats

The drivers' ``call`` queues the packet (``ClientProtocol.start``), waits for
the answer with the same correlation id, and returns ``request.parse(answer)``.
An ``Error`` answer never reaches a parser: it is raised as the error its code
names. A parser raises :class:`~chute.errors.LocalProtocolError` for an answer
of the wrong type (a broker bug).

Requests that change the client's own state (connect, opening and closing
sessions and consumers, transactions, sends) are made by
:class:`~chute.client.protocol.ClientProtocol` itself. Builders are pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from chute.core.model.address import canonical
from chute.errors import LocalProtocolError
from chute.message import Message
from chute.protocol import packets
from chute.protocol.columns import RawCursorPage
from chute.protocol.packets import (
    BrowseFetch,
    CallbackCreate,
    CursorAck,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    DeadLetterRetry,
    DeadLetterRetryResult,
    DestinationCreate,
    DestinationDelete,
    DestinationPurge,
    Move,
    Ok,
    Packet,
    PacketType,
    StatFetch,
    TempQueue,
    TempQueueCreated,
    Unsubscribe,
    XaCommit,
    XaCommitBatch,
    XaRecover,
    XaRollback,
)
from chute.protocol.spec import HEADER_SIZE
from chute.protocol.wire import encode_packet

T = TypeVar("T")
P = TypeVar("P", bound=Packet)

Page = tuple[tuple[int, Message], ...]
"""Messages of a cursor read, as ``(seq, message)`` pairs in sequence order."""
CursorPage = tuple[int, Page]
"""A page of a cursor fetch: ``(next start, ((seq, message), ...))``."""


@dataclass(frozen=True, slots=True)
class Request(Generic[T]):
    """A request packet and the parser of its answer: what a driver's ``call`` sends."""

    packet: Packet
    parse: Callable[[Packet], T]


@dataclass(frozen=True, slots=True)
class Pending(Generic[T]):
    """A request on its way: the correlation id its answer will carry, and the request
    (whose parser reads that answer). For a driver that sends a request now and
    takes its result later."""

    corr: int
    request: Request[T]


def expect(packet: Packet, cls: type[P]) -> P:
    """``packet`` as a ``cls``.

    Raises:
        LocalProtocolError: the broker answered with another packet type.
    """
    if not isinstance(packet, cls):
        raise LocalProtocolError(
            f"broker answered {type(packet).__name__} where {cls.__name__} was expected"
        )
    return packet


def ok(packet: Packet) -> None:
    """The parser of a request whose answer is a plain ``Ok``."""
    expect(packet, Ok)


# -- management -------------------------------------------------------------------------


def browse_fetch(  # noqa: PLR0917 - mirrors the packet
    address: str,
    selector: str | None = None,
    after: int = 0,
    before: int = 0,
    max_messages: int = 0,
    max_bytes: int = 0,
) -> Request[packets.BrowsePage]:
    """One page of a walk over a queue in sequence order, nothing consumed; ``before``
    0 starts a walk. Send the answer's ``after`` and ``before`` back for the next page,
    until it is ``done``."""
    return Request(
        BrowseFetch(canonical(address), selector, after, before, max_messages, max_bytes),
        _browse_page,
    )


def _browse_page(packet: Packet) -> packets.BrowsePage:
    return expect(packet, packets.BrowsePage)


def stat_fetch(pattern: str | None = None, after: str = "", limit: int = 0) -> Request[StatsPage]:
    """One page of the broker's statistics (see :func:`join_stats`)."""
    return Request(StatFetch(pattern, after, limit), _stat_page)


StatsPage = tuple[dict[str, Any], str | None]
"""A page of statistics: the JSON document, and the next page's ``after`` (None: last)."""


def _stat_page(packet: Packet) -> StatsPage:
    page = expect(packet, packets.StatPage)
    document: dict[str, Any] = json.loads(page.json_text)
    return document, page.next


def join_stats(joined: dict[str, Any], page: dict[str, Any]) -> dict[str, Any]:
    """The pages so far with one more: its destinations appended, its broker-wide
    figures (the newest) kept."""
    joined["destinations"] += page["destinations"]
    page["destinations"] = joined["destinations"]
    return page


def temporary_queue() -> Request[str]:
    """A queue that lives as long as the connection; the answer is its address."""
    return Request(TempQueue(), _temporary_queue)


def _temporary_queue(packet: Packet) -> str:
    return expect(packet, TempQueueCreated).address


def unsubscribe(subscription: str, client_id: str | None = None) -> Request[None]:
    """Delete a durable subscription (of the connection's client id by default)."""
    return Request(Unsubscribe(subscription, client_id), ok)


def callback(
    topic: str, subscription: str, forward_to: str, selector: str | None = None
) -> Request[None]:
    """Create a callback queue: a durable subscription forwarding to ``forward_to``."""
    return Request(
        CallbackCreate(canonical(topic), subscription, canonical(forward_to), selector), ok
    )


def delete(address: str, force: bool = False) -> Request[int]:
    """Delete a queue or topic (``force``: with its durable subscriptions); the answer is
    how many messages went with it."""
    return Request(DestinationDelete(canonical(address), force), _count)


def create(address: str) -> Request[bool]:
    """Make a queue, topic or stream; the answer is True if made, False if it existed."""
    return Request(DestinationCreate(canonical(address)), _made)


def _made(packet: Packet) -> bool:
    return _count(packet) == 1


def purge(address: str) -> Request[int]:
    """Remove every waiting message of a queue; the answer is how many."""
    return Request(DestinationPurge(canonical(address)), _count)


def move(
    source: str,
    target: str,
    selector: str | None = None,
    seqs: Sequence[int] | None = None,
    limit: int = 0,
) -> Request[int]:
    """Move waiting messages of queue ``source`` to ``target``; the answer is how many."""
    packet = Move(canonical(source), canonical(target), selector, tuple(seqs or ()), limit)
    return Request(packet, _count)


def retry_dead_letters(
    source: str, selector: str | None = None, seqs: Sequence[int] | None = None, limit: int = 0
) -> Request[dict[str, int]]:
    """Send dead letters back where they came from; the answer is how many went to each
    destination."""
    packet = DeadLetterRetry(canonical(source), selector, tuple(seqs or ()), limit)
    return Request(packet, _retried)


def _retried(packet: Packet) -> dict[str, int]:
    return dict(expect(packet, DeadLetterRetryResult).counts)


FEATURES: Final[dict[int, str]] = {
    PacketType.MOVE: "move",
    PacketType.DEAD_LETTER_RETRY: "dead-letter retry",
    PacketType.DESTINATION_CREATE: "create",
}
"""What the packets newer than some brokers do, to say what an older broker lacks."""
_UNKNOWN_TYPE: Final = re.compile(r"unknown packet type (\d+)")


def unsupported(reason: str) -> str | None:
    """The feature an ``unknown-packet-type`` error's ``reason`` says the broker lacks
    (None: not one of :data:`FEATURES`)."""
    found = _UNKNOWN_TYPE.search(reason)
    return FEATURES.get(int(found.group(1))) if found else None


def _count(packet: Packet) -> int:
    value = expect(packet, Ok).value
    if value is None or not value.isdigit():
        raise LocalProtocolError(f"broker answered Ok({value!r}) where a count was expected")
    return int(value)


# -- two-phase transactions ---------------------------------------------------------------


def prepared() -> Request[list[str]]:
    """The xids of every prepared transaction waiting in the broker."""
    return Request(XaRecover(), _xids)


def _xids(packet: Packet) -> list[str]:
    xids: list[str] = json.loads(expect(packet, Ok).value or "[]")
    return xids


def commit_prepared(xid: str) -> Request[None]:
    return Request(XaCommit(xid), ok)


def rollback_prepared(xid: str) -> Request[None]:
    return Request(XaRollback(xid), ok)


def commit_batch(sink: str, batch: int, xids: Sequence[str], keep: bool) -> Request[bool]:
    """Commit ``xids`` together, once per (sink, batch); the answer is False when the
    batch had been committed before (a duplicate: the xids were rolled back)."""
    return Request(XaCommitBatch(sink, batch, tuple(xids), keep), _committed_now)


def _committed_now(packet: Packet) -> bool:
    return expect(packet, Ok).value != "duplicate"


# -- cursors (docs/spark.md) ----------------------------------------------------------------


def cursor_open(
    address: str, cursor: str | None, selector: str | None, lease_ms: int
) -> Request[tuple[int, int]]:
    """Open (or refresh) a cursor; the answer is ``(earliest, head)``."""
    return Request(CursorOpen(canonical(address), cursor, selector, lease_ms), _cursor_info)


def _cursor_info(packet: Packet) -> tuple[int, int]:
    info = expect(packet, CursorInfo)
    return info.earliest, info.head


def cursor_fetch(  # noqa: PLR0917 - mirrors the packet
    address: str, cursor: str | None, start: int, end: int, max_messages: int, max_bytes: int
) -> Request[CursorPage]:
    """One page of the messages with ``start <= seq < end``, not consumed."""
    return Request(
        CursorFetch(canonical(address), cursor, start, end, max_messages, max_bytes), _page
    )


def _page(packet: Packet) -> CursorPage:
    page = expect(packet, packets.CursorPage)
    if isinstance(page, RawCursorPage):  # the client's codec leaves pages undecoded
        page = page.decode()
    return page.next, page.messages


def cursor_fetch_raw(  # noqa: PLR0917 - mirrors the packet
    address: str, cursor: str | None, start: int, end: int, max_messages: int, max_bytes: int
) -> Request[tuple[int, bytes]]:
    """As :func:`cursor_fetch`, but the answer is ``(next start, the CursorPage's body)``:
    its entries undecoded, for :func:`chute.protocol.columns.page_columns`."""
    return Request(
        CursorFetch(canonical(address), cursor, start, end, max_messages, max_bytes), _raw_page
    )


def _raw_page(packet: Packet) -> tuple[int, bytes]:
    page = expect(packet, packets.CursorPage)
    if isinstance(page, RawCursorPage):
        return page.next, page.body
    return page.next, encode_packet(page)[HEADER_SIZE:]  # a codec that decoded it


def cursor_ack(address: str, cursor: str, end: int) -> Request[None]:
    """Consume every message the cursor holds below ``end``."""
    return Request(CursorAck(canonical(address), cursor, end), ok)


def cursor_close(address: str, cursor: str, delete: bool) -> Request[None]:
    """Release the cursor's lease (``delete``: and forget it)."""
    return Request(CursorClose(canonical(address), cursor, delete), ok)
