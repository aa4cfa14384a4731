"""Compacted streams: only the newest message of each key is kept (Kafka's compacted topics).

Theory of operation
-------------------
A stream whose settings say ``cleanup = "compact"`` keeps, for each ``key`` (the
message's key, :attr:`chute.message.Message.key`), only the newest message: the
latest state per key, which a reader from ``first`` replays. Retention by time and
size applies as well, as on any stream. The rules, as Kafka's:

* **Offsets never change.** A message compaction removes leaves a gap in the
  stream's offsets; every read skips it, so a reader at a removed offset gets the
  next message kept.
* **Keyless messages** are never compacted: retention alone removes them.
* **Tombstones.** A keyed message with an empty body is a tombstone: it removes
  every older message of its key, and is itself removed once it is older than
  ``compact_tombstones_ms`` (by the time the broker accepted it), so that the key
  is gone for readers that replay from the start later.
* **Only what is sealed.** Compaction looks only at messages the store holds in
  parts that take no more writes (the journal's segments before the one being
  written, :meth:`~chute.core.model.store.Store.sealed`): the newest messages,
  those a reader following the stream is reading now, are never compacted.

:class:`Compaction` runs on the broker's sweep (every ``expiry_interval_ms``), a
step per stream at a time. For each compacted stream it keeps the newest offset of
every key seen (:class:`_Log`). The stream notes each keyed message it appends
(:attr:`~chute.core.model.stream.Stream.keyed`: offset, key, size, time, tombstone or
not, no store read); once the store has sealed it, a step takes it into account, and
it makes the key's previous offset removed
(:meth:`~chute.core.model.stream.Stream.remove`, which acks it in the store). The
journal then frees what it no longer holds: a segment with nothing kept is deleted,
a sparse one rewritten (its kept records copied forward, :mod:`chute.store.reclaim`),
so the disk a compacted stream takes follows the number of its keys.

After a restart the index is empty: the messages recovered are read back from the
store (at most :data:`SCAN_STEP` a sweep), from the stream's first offset on. They
are only what was kept (and any removal the crash lost, which is done again). A
removal is an ack recorded after the newer message it makes redundant (that one is
sealed, so on disk), and the journal never keeps an ack without what it cancels: a
``kill -9`` at any point loses nothing kept and never brings back an older message
as the newest of its key.

Memory: the newest offset and size of each key of each compacted stream (about
200 bytes a key), and a note of each keyed message appended but not yet sealed.
Pure: no sockets, no files; called from the broker's loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Final

from chute.core.model.settings import Cleanup
from chute.core.model.store import Store
from chute.core.model.stream import Keyed, Stream
from chute.errors import StoreError

log = logging.getLogger("chute.stream")

SCAN_STEP: Final = 2048
"""Messages read back from the store per stream per sweep, at most (the rest on the next
sweep): after a restart only, tens of microseconds each on the broker's loop."""

READ_PAGE: Final = 512


class _Recorded:
    """A sync's callback: whether the store has recorded the removals before it."""

    __slots__ = ("done", "failed")

    def __init__(self) -> None:
        self.done = False
        self.failed = False

    def __call__(self, error: BaseException | None) -> None:  # any thread: sets flags only
        if error is None:
            self.done = True
        else:
            self.failed = True


class _Log:
    """What compaction knows of one stream."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.scanned = 0  # offsets below this were scanned
        self.newest: dict[str, tuple[int, int]] = {}  # key -> (offset, Message.size)
        self.tombstones: dict[str, int] = {}  # key -> the time its tombstone was accepted
        self.unrecorded: list[tuple[list[int], _Recorded]] = []  # removals not yet on record
        self.first = 0  # the stream's first offset when last looked at
        self.failing = False  # the store failed a read (logged once)


class Compaction:
    """The compaction of every compacted stream of a broker (see the module docstring)."""

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}

    def sweep(self, streams: Iterable[Stream], store: Store, now: int) -> int:
        """A step of compaction on each compacted stream; returns how many messages went."""
        removed = 0
        seen: set[str] = set()
        for stream in streams:
            if stream.settings.cleanup is not Cleanup.COMPACT or stream.deleted:
                continue
            seen.add(stream.address)
            state = self._logs.get(stream.address)
            if state is None or state.stream is not stream:  # new, or made again
                state = self._logs[stream.address] = _Log(stream)
            try:
                removed += self.step(state, store, now)
            except StoreError as exc:  # the disk: the next sweep tries again
                if not state.failing:
                    log.warning("stream %s: compaction cannot read it now: %s", stream.address, exc)
                state.failing = True
            else:
                state.failing = False
        for address in [a for a in self._logs if a not in seen]:
            del self._logs[address]
        return removed

    def step(self, state: _Log, store: Store, now: int) -> int:
        """Look at the sealed messages not looked at yet (those appended as they were
        recorded, those recovered read back from the store, at most :data:`SCAN_STEP`),
        remove those made redundant and the tombstones past their time; returns how many
        went."""
        stream = state.stream
        self._forget_recorded(state, store)
        sealed = min(store.sealed(stream.address), stream.head)
        gone: list[tuple[int, int]] = []
        note = self._noter(state, gone)
        keyed = stream.keyed
        if keyed is None:  # the stream became compacted: what it holds is read back
            keyed = stream.keyed = []
            stream.recovered_below = stream.next_seq
        count = 0
        for record in keyed:
            if record[0] >= sealed:
                break
            note(record)
            count += 1
        del keyed[:count]
        end = min(sealed, stream.recovered_below)
        position = max(state.scanned, stream.first)
        budget = SCAN_STEP
        while position < end and budget > 0:
            position, entries = stream.read(position, end, max_messages=min(READ_PAGE, budget))
            budget -= max(1, len(entries))
            for entry in entries:
                message = entry.message
                key = message.key
                if key is not None:
                    note((entry.seq, key, message.size, message.timestamp, not message.body))
        state.scanned = max(state.scanned, position)
        newest, tombstones = state.newest, state.tombstones
        keep_for = stream.settings.compact_tombstones_ms
        for key in [k for k, at in tombstones.items() if at < now - keep_for]:
            del tombstones[key]
            gone.append(newest.pop(key))
        if stream.first > state.first:  # retention or a purge removed the oldest
            state.first = stream.first
            for key in [k for k, (seq, _) in newest.items() if seq < stream.first]:
                del newest[key]
                tombstones.pop(key, None)
        if not gone:
            return 0
        gone.sort()
        removed = stream.remove(gone)
        if removed:
            recorded = _Recorded()
            state.unrecorded.append(([seq for seq, _ in gone], recorded))
            store.sync(recorded)
            log.debug("stream %s: compaction removed %d messages", stream.address, removed)
        return removed

    @staticmethod
    def _noter(state: _Log, gone: list[tuple[int, int]]) -> Callable[[Keyed], None]:
        """What takes each keyed message into account, in any order: the newest offset of
        its key stays, any other goes to ``gone``."""
        newest, tombstones = state.newest, state.tombstones
        first = state.stream.first

        def note(record: Keyed) -> None:
            seq, key, size, timestamp, tombstone = record
            if seq < first:
                return  # retention removed it already
            before = newest.get(key)
            if before is not None and before[0] == seq:
                return  # noted twice: committed after a restart it was prepared before
            if before is not None and before[0] > seq:
                gone.append((seq, size))  # a newer one is known (a prepared send's commit)
                return
            if before is not None:
                gone.append(before)
            newest[key] = (seq, size)
            if tombstone:
                tombstones[key] = timestamp
            else:
                tombstones.pop(key, None)

        return note

    @staticmethod
    def _forget_recorded(state: _Log, store: Store) -> None:
        """Reads stop skipping the removals the store has recorded (a failed sync: ask
        again)."""
        waiting: list[tuple[list[int], _Recorded]] = []
        for seqs, recorded in state.unrecorded:
            if recorded.done:
                state.stream.forget_gaps(seqs)
            else:
                if recorded.failed:
                    recorded.failed = False
                    store.sync(recorded)
                waiting.append((seqs, recorded))
        state.unrecorded = waiting
