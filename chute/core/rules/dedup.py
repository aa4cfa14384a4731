"""Duplicate detection: a producer's resend of a message the broker already holds is
dropped, and confirmed as the first send was.

A client that loses its broker with persistent sends unconfirmed cannot know whether
the broker stored them: it sends them again, unchanged (same message ids), on the
node it reaches next (the same node come back, or a backup that took over). For that
resend to store nothing twice, the broker remembers, per **producer** (a name the
client gives a session when it opens it), the ids of the producer's recent stored
requests: a send whose id is among them is a resend, and is not stored again.

What is remembered, and for how long:

- a request's **first** message id: a ``Send``'s message, a ``SendMany``'s first
  message (a SendMany is stored all or none, so its first id stands for it all);
- only persistent sends outside a transaction, the ones a client waits on and resends
  (a transaction in progress is not resent: the client fails it, to be retried);
- the last ``window`` ids of each producer (a confirm window of at most ``window``
  requests is always covered), and the ``producers`` producers that stored most
  recently (the one that stored least recently is forgotten first);
- across a restart: each id is written to the store as a small record of its own
  (:meth:`~chute.core.model.store.Store.sent`) in the same turn as the message, so
  the sync that confirms the message covers it; recovery hands them back in the
  order they were written, and :meth:`SentIds.restore` replays them.

Not thread-safe: one per broker, used on its loop.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Final, Protocol

DEFAULT_WINDOW: Final = 256
"""Ids remembered per producer."""
DEFAULT_PRODUCERS: Final = 1024
"""Producers remembered."""


class SentLog(Protocol):
    """Where an id goes to outlive the process (the broker's store)."""

    def sent(self, producer: str, message_id: str) -> None: ...


class SentIds:
    """The recent request ids of each producer, bounded twice (ids per producer,
    producers)."""

    __slots__ = ("_log", "_producers", "max_producers", "window")

    def __init__(
        self, log: SentLog, window: int = DEFAULT_WINDOW, producers: int = DEFAULT_PRODUCERS
    ) -> None:
        if window < 1 or producers < 1:
            raise ValueError("a duplicate-detection window and its producers must be >= 1")
        self._log = log
        self.window = window
        self.max_producers = producers
        # producer -> its ids (a dict as an ordered set), least recently stored first
        self._producers: collections.OrderedDict[str, dict[str, None]] = collections.OrderedDict()

    def __len__(self) -> int:
        """How many producers are remembered."""
        return len(self._producers)

    def seen(self, producer: str, message_id: str) -> bool:
        """Whether ``producer`` stored a request with first id ``message_id`` lately."""
        ids = self._producers.get(producer)
        return ids is not None and message_id in ids

    def stored(self, producer: str, message_id: str) -> None:
        """``producer``'s request with first id ``message_id`` was stored: remember it,
        here and in the store."""
        self._remember(producer, message_id)
        self._log.sent(producer, message_id)

    def restore(self, sent: Iterable[tuple[str, str]]) -> None:
        """Remember what the store recovered, ``(producer, id)`` in the order stored."""
        for producer, message_id in sent:
            self._remember(producer, message_id)

    def _remember(self, producer: str, message_id: str) -> None:
        producers = self._producers
        ids = producers.get(producer)
        if ids is None:
            ids = producers[producer] = {}
            if len(producers) > self.max_producers:
                producers.popitem(last=False)
        else:
            producers.move_to_end(producer)
        ids[message_id] = None
        if len(ids) > self.window:
            del ids[next(iter(ids))]


__all__ = ["DEFAULT_PRODUCERS", "DEFAULT_WINDOW", "SentIds", "SentLog"]
