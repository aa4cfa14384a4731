"""Looking at the broker: a destination browsed by its address, and the statistics.

Both answer a page at a time, bounded by the broker (``PAGE_MESSAGES`` and
``PAGE_BYTES`` for a browse, ``STAT_PAGE`` for statistics), and keep nothing
between pages: the walk over one queue is :mod:`chute.core.operations.browse`, the walk
over the destinations :mod:`chute.core.operations.stats`. This module finds what an
address names (a queue, a stream; a topic holds nothing to browse) and adds
the broker-wide figures to a page of statistics.

Looking is not using: nothing is made (a queue that does not exist holds
nothing), consumed or changed. The whole walks (:func:`browse`, :func:`stats`)
are for tests and in-process use; a driver answers a client page by page,
through its :class:`~chute.core.operations.connection.BrokerConnection`, which checks who may
see what. What it needs of the broker is :class:`LookingHost`. Pure; used from
the broker's loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from chute.core.model.address import Kind, parse
from chute.core.model.consumer import Entry
from chute.core.model.registry import Registry
from chute.core.model.selector import compile_selector
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic
from chute.core.operations.browse import (
    PAGE_BYTES,
    PAGE_MESSAGES,
    BrowsePage,
    at_once,
    clamp,
    finish,
    page_in_steps,
    stream_page,
)
from chute.core.operations.stats import STAT_PAGE
from chute.core.operations.stats import stats_page as destinations_page
from chute.core.rules.access import Client
from chute.core.rules.admission import Admission
from chute.core.rules.destinations import Destinations
from chute.core.rules.diversion import Diversion
from chute.core.rules.twophase import PreparedTransactions
from chute.errors import InvalidAddress


class LookingHost(Registry, Protocol):
    """What looking needs of the broker."""

    admission: Admission
    destinations: Destinations
    diversion: Diversion
    xa: PreparedTransactions

    @property
    def connections(self) -> Mapping[str, Client]: ...


def browse_page(
    host: LookingHost,
    address: str,
    *,
    after: int = 0,
    before: int = 0,
    selector: str | None = None,
    max_messages: int = 0,
    max_bytes: int = 0,
) -> BrowsePage:
    """One page of a walk over a queue in sequence order (see :mod:`chute.core.operations.browse`);
    nothing is consumed, and nothing is created (looking is not using): a queue that
    does not exist holds nothing. The bounds are clamped to the broker's
    (``PAGE_MESSAGES``, ``PAGE_BYTES``); 0 asks for those.

    Raises:
        InvalidAddress: a bad address; a topic (browse one of its subscriptions'
            queues instead).
        InvalidSelector: a bad selector.
        StoreError: paged messages cannot be read now.
    """
    return finish(
        browse_steps(
            host,
            address,
            after=after,
            before=before,
            selector=selector,
            max_messages=max_messages,
            max_bytes=max_bytes,
        )
    )


def browse_steps(
    host: LookingHost,
    address: str,
    *,
    after: int = 0,
    before: int = 0,
    selector: str | None = None,
    max_messages: int = 0,
    max_bytes: int = 0,
) -> Generator[None, None, BrowsePage]:
    """:func:`browse_page`'s page built in steps, one per ``next()`` (the page is the
    generator's return value; see :func:`chute.core.operations.browse.page_in_steps`): a driver
    serves other clients between them. The address and selector are checked here
    (raising as :func:`browse_page`); a step may raise ``StoreError``."""
    addr = parse(address)
    compiled = compile_selector(selector) if selector else None
    dest = host.find(str(addr))
    if dest is None:
        if addr.kind is Kind.TOPIC:
            raise InvalidAddress(f"{addr} is a topic: a topic holds nothing to browse")
        return at_once(BrowsePage([], after, max(before, after + 1), True))
    if isinstance(dest, Topic):
        raise InvalidAddress(f"{address} is a topic: a topic holds nothing to browse")
    if isinstance(dest, Stream):
        return at_once(stream_page(dest, after, before, max_messages, max_bytes, compiled))
    return page_in_steps(
        dest,
        after,
        before,
        max_messages=clamp(max_messages, PAGE_MESSAGES),
        max_bytes=clamp(max_bytes, PAGE_BYTES),
        selector=compiled,
    )


def browse(
    host: LookingHost, address: str, selector: str | None = None, limit: int = 0
) -> list[Entry]:
    """A whole walk at once (:func:`browse_page` until done): every message of a queue
    in sequence order, at most ``limit`` (0: all). For tests and in-process use; a
    driver answers a client page by page. Raises as :func:`browse_page`."""
    entries: list[Entry] = []
    after = before = 0
    while True:
        page = browse_page(host, address, after=after, before=before, selector=selector)
        entries += page.entries
        if page.done or (limit > 0 and len(entries) >= limit):
            return entries[:limit] if limit > 0 else entries
        after, before = page.after, page.before


def stats_page(
    host: LookingHost,
    *,
    pattern: str | None = None,
    after: str = "",
    limit: int = 0,
    sees: Callable[[str], bool] | None = None,
    contains: str = "",
) -> dict[str, Any]:
    """One page of destinations with depth, consumers and in/out counts, and the
    broker-wide figures (JSON-ready; see :mod:`chute.core.operations.stats`): ``destinations``,
    ``next`` (the page's last address, to pass as ``after``; None: done),
    ``destination_count``, ``made`` (how many destinations clients made by
    use), ``connections``, ``prepared``, ``discarded``, ``memory``,
    ``producers``. ``limit`` is clamped to
    ``STAT_PAGE``; 0 asks for that. ``contains``: only addresses holding that text
    (case-insensitively).

    Raises:
        InvalidAddress: a bad ``pattern``.
    """
    page = destinations_page(
        host.queues,
        host.topics,
        pattern=pattern,
        after=after,
        limit=clamp(limit, STAT_PAGE),
        sees=sees,
        streams=host.streams,
        contains=contains,
    )
    return {
        "destinations": page.destinations,
        "next": page.after,
        "destination_count": len(host.queues) + len(host.topics) + len(host.streams),
        "made": host.destinations.stats(),
        "connections": len(host.connections),
        "prepared": host.xa.xids(),
        "discarded": host.diversion.discarded,
        "memory": {
            "held": host.memory.used,
            "paging_at": host.memory.limit,
            "high_watermark": host.memory.high,
            "low_watermark": host.memory.low,
        },
        "producers": {
            "waiting": host.admission.waiting,
            "blocked_by": host.admission.reason,
        },
    }


def stats(host: LookingHost, pattern: str | None = None) -> dict[str, Any]:
    """Every destination (matching ``pattern``) at once: :func:`stats_page` joined.
    For tests and in-process use; a driver answers a client page by page."""
    return joined_pages(lambda after: stats_page(host, pattern=pattern, after=after))


def joined_pages(page: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Every page of statistics ``page(after)`` gives, from the first (``after=""``)
    until one has no ``next``: the last page's broker-wide figures with every page's
    destinations."""
    joined = page("")
    destinations: list[dict[str, Any]] = joined["destinations"]
    while joined["next"] is not None:
        joined = page(joined["next"])
        destinations += joined["destinations"]
    joined["destinations"] = destinations
    del joined["next"]
    return joined
