"""The client API, declared once: what every chute client offers, as typed protocols.

The protocols are declared once, in their asyncio shape
(:mod:`chute.client.api_async`: :class:`AsyncConnection`, :class:`AsyncSession`,
:class:`AsyncConsumer`), and the blocking shape (:class:`Connection`,
:class:`Session`, :class:`Consumer`) is written from it
(:mod:`chute.client.api_blocking`, by ``scripts/unasync.py``); this module
gathers both. Three clients implement the blocking shape:

* :mod:`chute.client.blocking`, a broker over ``chute://`` or ``chutes://``;
* :mod:`chute.dropbox.client`, a DropboxMQ directory, no broker (``dropbox:``);
* and, through ``await``, :mod:`chute.client.aio_client`, which implements the
  asyncio shape: the same methods, those that talk to the broker as coroutines.

:func:`chute.connect` returns a :class:`Connection`. mypy checks that each
client conforms (``tests/unit/client/test_api.py``), and one behavioural suite
runs against all three (``tests/integration/test_client_api.py``). What a
client cannot do it still offers, raising the error documented on the method
(the dropbox client: cursors, callback queues, two-phase transactions,
exclusive consumers). The semantics are in docs/client.md; the methods'
arguments and errors are documented once, on the protocols.

Messages come back as :class:`~chute.client.received.Received`, shared by all
clients. Whether objects may be shared between threads is each client's
business (the blocking client: yes; the dropbox client: one thread at a time;
asyncio: one event loop).
"""

from __future__ import annotations

from chute.client.api_async import AsyncConnection, AsyncConsumer, AsyncSession
from chute.client.api_blocking import Connection, Consumer, Session
from chute.client.requests import CursorPage, Page

__all__ = [
    "AsyncConnection",
    "AsyncConsumer",
    "AsyncSession",
    "Connection",
    "Consumer",
    "CursorPage",
    "Page",
    "Session",
]
