"""Request/response correlation for one client connection: ids in, answers out.

Every request packet carries a correlation id (DESIGN.md, native protocol);
the broker's answer (``Ok``, ``Error`` or a ``...Result``) carries it back.
:class:`Correlator` hands out the ids, remembers which requests still wait,
keeps each answer until its driver takes it, and drops an answer nobody waits
for any more (a request that timed out). Once the connection fails, every
request still waiting and every later one gets that failure instead.

A request the broker holds (a send waiting for room) is told so by a ``Held``
notice before its answer: the correlator keeps the latest notice of each
waiting request, numbered, so its driver waits as long as the broker may hold
it (each new notice from when it came) and, should it still give up, says what
held it.

Ids are 32-bit and never 0 (0 marks a one-way packet); they wrap after 2³²
requests, long after any request could still be waiting.

Not thread-safe: part of :class:`~chute.client.protocol.ClientProtocol`, whose
driver serialises calls.
"""

from __future__ import annotations

import itertools
from typing import Final

from chute.errors import ChuteError, RequestTimeout
from chute.protocol.packets import Held, Packet

_ID_BITS: Final = 0xFFFF_FFFF


class Correlator:
    """The requests of one connection that await an answer. Not thread-safe."""

    __slots__ = ("_answers", "_held", "_ids", "_notices", "_pending", "failure")

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: set[int] = set()
        self._answers: dict[int, Packet | ChuteError] = {}
        self._held: dict[int, tuple[int, Held]] = {}  # corr -> (notice number, notice)
        self._notices = itertools.count(1)
        self.failure: ChuteError | None = None
        """Set once the connection failed: what every waiter gets."""

    def __len__(self) -> int:
        """How many requests await their answer."""
        return len(self._pending)

    def open(self) -> int:
        """A new correlation id, now awaiting its answer.

        Raises:
            ChuteError: the connection failed (:attr:`failure`).
        """
        if self.failure is not None:
            raise self.failure
        corr = next(self._ids) & _ID_BITS or next(self._ids) & _ID_BITS
        self._pending.add(corr)
        return corr

    def cancel(self, corr: int) -> None:
        """The request ``corr`` was never sent (it could not be encoded)."""
        self._pending.discard(corr)

    def answer(self, corr: int, answer: Packet | ChuteError) -> bool:
        """Record the answer to ``corr``; False (and dropped) if nobody waits for it."""
        if corr not in self._pending:
            return False
        self._pending.discard(corr)
        self._held.pop(corr, None)
        self._answers[corr] = answer
        return True

    def hold(self, corr: int, notice: Held) -> bool:
        """The broker holds request ``corr``; False (and dropped) if nobody waits for it."""
        if corr not in self._pending:
            return False
        self._held[corr] = (next(self._notices), notice)
        return True

    def held(self, corr: int) -> tuple[int, Held] | None:
        """The latest notice that the broker holds request ``corr``, and its number (a
        new notice has a new one), while the request waits; None if it was never held."""
        return self._held.get(corr)

    def result(self, corr: int) -> Packet | None:
        """The answer to request ``corr`` (taken), or None while it has not arrived.

        Raises:
            ChuteError: the broker answered with an error (rebuilt by its code).
            ConnectError: the connection failed before the answer came.
        """
        answer = self._answers.pop(corr, None)
        if answer is None:
            if self.failure is not None:
                self._pending.discard(corr)
                raise self.failure
            return None
        if isinstance(answer, ChuteError):
            raise answer
        return answer

    def forget(self, corr: int) -> None:
        """Stop waiting for ``corr`` (timed out): a late answer is dropped."""
        self._pending.discard(corr)
        self._answers.pop(corr, None)
        self._held.pop(corr, None)

    def fail(self, error: ChuteError) -> list[int]:
        """The connection is gone: ``error`` (or the first failure) for every waiter.
        Returns the ids that were waiting, to wake their drivers."""
        if self.failure is None:
            self.failure = error
        waiting = list(self._pending)
        self._pending.clear()
        self._held.clear()
        return waiting


def held_longer(limit: float, notice: Held) -> float:
    """Seconds from a :class:`Held` notice's arrival that its request's waiter waits:
    as long as the broker may hold the request, then its own ``limit`` for the answer
    to arrive."""
    return notice.timeout_ms / 1000 + limit


def unanswered(waited: float, notice: Held | None) -> RequestTimeout:
    """The error of a request that got no answer in ``waited`` seconds, saying what held
    it if the broker said (``notice``)."""
    if notice is None:
        return RequestTimeout(f"no answer from the broker within {waited:g} s")
    return RequestTimeout(
        f"no answer from the broker within {waited:g} s; it held this request: "
        f"{notice.reason} (for up to {notice.timeout_ms} ms)"
    )
