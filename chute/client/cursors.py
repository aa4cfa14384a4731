# Written by scripts/unasync.py from chute/client/aio_cursors.py: edit that, then run the script.
"""The blocking client's cursor calls (reading a destination by sequence number, as
Spark's source does: docs/spark.md): :class:`Cursors`, which
:class:`~chute.client.blocking.BlockingConnection` is. A page's next request goes out
while the caller works on this one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, TypeVar

from chute.client import requests
from chute.client.api import Page
from chute.client.nodes import OnNode
from chute.client.requests import CursorPage

T = TypeVar("T")

_NO_ENTRIES: Final = bytes(4)  # a CursorPage body's entry count when it has none


class Cursors:
    """The cursor calls of a connection, over its ``_call`` and the node it is on."""

    _on: OnNode

    def _call(self, request: requests.Request[T]) -> T:
        raise NotImplementedError

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        return self._call(requests.cursor_open(address, cursor, selector, lease_ms))

    def cursor_fetch(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> CursorPage:
        return self._call(
            requests.cursor_fetch(address, cursor, start, end, max_messages, max_bytes)
        )

    def cursor_read(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[Page]:
        """Pages of ``[start, end)``; the request for the next page goes out while the
        caller works on this one."""
        for page in self._pages(
            requests.cursor_fetch, address, cursor, start, end, page_messages, page_bytes
        ):
            if page:
                yield page

    def cursor_read_raw(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[bytes]:
        """As :meth:`cursor_read`, but each page is the CursorPage's body, its entries
        undecoded (for :func:`chute.protocol.columns.page_columns`; Spark's source reads
        them so). Pages without messages are skipped."""
        for body in self._pages(
            requests.cursor_fetch_raw, address, cursor, start, end, page_messages, page_bytes
        ):
            if body[8:12] != _NO_ENTRIES:
                yield body

    def _pages(  # noqa: PLR0917 - the arguments of a cursor fetch
        self,
        fetch: Callable[[str, str | None, int, int, int, int], requests.Request[tuple[int, T]]],
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        page_messages: int,
        page_bytes: int,
    ) -> Iterator[T]:
        """Each page's answer (what follows ``next`` in it) for ``[start, end)``,
        requesting the next page before handing out this one."""
        link = self._on.current()
        if start >= end:
            return
        pending = link.start(fetch(address, cursor, start, end, page_messages, page_bytes))
        while True:
            next_start, page = link.result(pending)
            more = start < next_start < end
            if more:
                pending = link.start(
                    fetch(address, cursor, next_start, end, page_messages, page_bytes)
                )
            yield page
            if not more:
                return
            start = next_start

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        self._call(requests.cursor_ack(address, cursor, end))

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        self._call(requests.cursor_close(address, cursor, delete))


__all__ = ["Cursors"]
