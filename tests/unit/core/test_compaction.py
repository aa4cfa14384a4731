"""Compacted streams (chute.core.rules.compaction): the newest message of each key is kept."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from chute.config import load as load_config
from chute.core.model import stream as stream_module
from chute.core.model.settings import Cleanup, DestinationSettings
from chute.core.model.store import SyncCallback
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import ConfigError
from chute.store.memory import MemoryStore

from .helpers import FakeClock, make_broker, msg, restart, stats_of
from .test_stream import read_all

S = "stream:s"
DAY = 86_400_000


class SealedStore(MemoryStore):
    """A MemoryStore whose sealed bound a test sets (a journal's current segment), and
    whose acks wait for the next sync when ``lag`` (a journal records them later)."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: int | None = None
        self.lag = False
        self.pending: list[tuple[str, list[int]]] = []
        self.callbacks: list[SyncCallback] = []

    def sealed(self, destination: str) -> int:
        return super().sealed(destination) if self.bound is None else self.bound

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        if self.lag:
            self.pending.append((queue, list(seqs)))
        else:
            super().acks(queue, seqs)

    def sync(self, callback: SyncCallback) -> None:
        if self.lag:
            self.callbacks.append(callback)
        else:
            super().sync(callback)

    def settle(self) -> None:
        for queue, seqs in self.pending:
            MemoryStore.acks(self, queue, seqs)
        self.pending.clear()
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(None)


def compacted(clock: FakeClock, store: MemoryStore | None = None, **more: int) -> Broker:
    settings = DestinationSettings(cleanup=Cleanup.COMPACT, **more)  # type: ignore[arg-type]
    return make_broker({S: settings}, clock=clock, store=store)


def send(broker: Broker, *pairs: tuple[str | None, bytes]) -> None:
    session = BrokerConnection(broker).session()
    for key, body in pairs:
        session.send(S, msg(body, key=key))


def rounds(broker: Broker, keys: int, times: int) -> None:
    send(broker, *[(f"k{k}", f"k{k}:{t}".encode()) for t in range(times) for k in range(keys)])


def stream_of(broker: Broker) -> Stream:
    return broker.streams[S]


def kept(broker: Broker) -> list[tuple[int, str | None, bytes]]:
    s = stream_of(broker)
    return [(e.seq, e.message.key, e.message.body) for e in s.read(1, s.head)[1]]


def stored(broker: Broker) -> list[int]:
    store = broker.store
    assert isinstance(store, MemoryStore)
    return sorted(store.messages.get(S, {}))


def test_only_the_newest_message_of_each_key_is_kept(clock: FakeClock) -> None:
    broker = compacted(clock)
    rounds(broker, keys=10, times=5)
    s = stream_of(broker)
    assert s.count == 50
    assert broker.compaction.sweep([s], broker.store, clock()) == 40
    assert kept(broker) == [(41 + k, f"k{k}", f"k{k}:4".encode()) for k in range(10)]
    assert (s.count, s.first, s.head, s.compacted) == (10, 1, 51, 40)  # first: a gap now
    assert s.bytes == sum(e.message.size for e in s.read(1, s.head)[1])
    assert stored(broker) == list(range(41, 51))  # the store keeps only those too


def test_offsets_never_change_and_a_read_at_a_removed_offset_gets_the_next_kept(
    clock: FakeClock,
) -> None:
    broker = compacted(clock)
    send(broker, ("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"), ("b", b"b2"))
    broker.expire_due()  # the broker's sweep runs compaction
    assert kept(broker) == [(3, "a", b"a2"), (4, "c", b"c1"), (5, "b", b"b2")]
    s = stream_of(broker)
    assert [e.seq for e in s.read(1, s.head, max_messages=1)[1]] == [3]
    assert [e.seq for e in s.read(2, s.head)[1]] == [3, 4, 5]
    assert [b[0] for b in s.read_blocks(1, s.head)[1]] == [3, 4, 5]
    _, reader = read_all(BrokerConnection(broker).session(), offset=1)
    assert reader.seqs == [3, 4, 5]
    send(broker, ("d", b"d1"))
    assert s.head == 7  # numbering goes on


def test_keyless_messages_are_left_to_retention(clock: FakeClock) -> None:
    broker = compacted(clock, max_messages=4)
    send(broker, (None, b"n1"), ("a", b"a1"), (None, b"n2"), ("a", b"a2"))
    broker.expire_due()
    assert kept(broker) == [(1, None, b"n1"), (3, None, b"n2"), (4, "a", b"a2")]
    send(broker, (None, b"n3"), (None, b"n4"))  # over max_messages: the oldest go
    assert kept(broker) == [(3, None, b"n2"), (4, "a", b"a2"), (5, None, b"n3"), (6, None, b"n4")]
    assert stream_of(broker).count == 4


def test_a_tombstone_removes_its_key_and_goes_itself_after_its_time(clock: FakeClock) -> None:
    broker = compacted(clock, compact_tombstones_ms=60_000)
    send(broker, ("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("a", b""))
    broker.expire_due()
    assert kept(broker) == [(2, "b", b"b1"), (4, "a", b"")]  # the tombstone, for a while
    clock.advance(60_000)
    broker.expire_due()
    assert kept(broker) == [(2, "b", b"b1"), (4, "a", b"")]
    clock.advance(1)
    broker.expire_due()
    assert kept(broker) == [(2, "b", b"b1")]
    send(broker, ("a", b"a3"))  # the key may come back
    broker.expire_due()
    assert kept(broker) == [(2, "b", b"b1"), (5, "a", b"a3")]


def test_what_is_not_sealed_is_never_compacted(clock: FakeClock) -> None:
    store = SealedStore()
    broker = compacted(clock, store)
    store.bound = 1  # nothing sealed: every message is in the segment being written
    rounds(broker, keys=2, times=3)
    broker.expire_due()
    assert len(kept(broker)) == 6
    store.bound = 5  # offsets 1-4 sealed: k0 and k1 were sent again in 3, 4 (and 5, 6)
    broker.expire_due()
    assert [seq for seq, _, _ in kept(broker)] == [3, 4, 5, 6]
    store.bound = None
    broker.expire_due()
    assert [seq for seq, _, _ in kept(broker)] == [5, 6]


def test_reads_skip_removals_the_store_has_not_recorded_yet(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "TAIL_BYTES", 1)  # the tail keeps one: reads go to the store
    store = SealedStore()
    broker = compacted(clock, store)
    rounds(broker, keys=3, times=3)
    store.lag = True
    broker.expire_due()
    s = stream_of(broker)
    assert stored(broker) == list(range(1, 10))  # the store still holds them ...
    assert [seq for seq, _, _ in kept(broker)] == [7, 8, 9]  # ... the reads skip them
    assert [b[0] for b in s.read_blocks(1, s.head)[1]] == [7, 8, 9]
    assert (s.first, s.last, s.count) == (1, 9, 3)
    store.settle()
    broker.expire_due()
    assert not s.gaps  # recorded: nothing left to skip
    assert stored(broker) == [7, 8, 9]


def test_compaction_goes_on_after_a_restart(clock: FakeClock) -> None:
    broker = compacted(clock)
    rounds(broker, keys=3, times=2)
    broker.expire_due()
    assert [seq for seq, _, _ in kept(broker)] == [4, 5, 6]
    send(broker, ("k0", b"k0:new"))
    again = restart(broker)  # a crash before the sweep: compaction scans it all again
    assert [seq for seq, _, _ in kept(again)] == [4, 5, 6, 7]
    again.expire_due()
    assert kept(again) == [(5, "k1", b"k1:1"), (6, "k2", b"k2:1"), (7, "k0", b"k0:new")]
    assert stream_of(again).count == 3


def test_retention_alongside_compaction_counts_each_message_once(clock: FakeClock) -> None:
    broker = compacted(clock, max_age_ms=10_000)
    rounds(broker, keys=4, times=2)
    broker.expire_due()
    assert [seq for seq, _, _ in kept(broker)] == [5, 6, 7, 8]
    clock.advance(5_000)
    send(broker, ("k0", b"late"), (None, b"plain"))
    clock.advance(5_001)
    broker.expire_due()  # age removes 5-8; compaction's newest of k0 is 9
    assert kept(broker) == [(9, "k0", b"late"), (10, None, b"plain")]
    s = stream_of(broker)
    assert (s.count, s.first) == (2, 9)
    send(broker, ("k0", b"later"))
    broker.expire_due()
    assert kept(broker) == [(10, None, b"plain"), (11, "k0", b"later")]
    assert s.count == 2


def test_what_was_recovered_is_read_back_over_several_sweeps(clock: FakeClock) -> None:
    broker = compacted(clock)
    rounds(broker, keys=100, times=100)  # 10,000 messages, more than a sweep reads back
    broker = restart(broker)  # none compacted yet: compaction reads them all back
    s = stream_of(broker)
    assert (s.count, s.recovered_below) == (10_000, 10_001)
    send(broker, ("k0", b"after"))  # appended after the restart: newer than all recovered
    sweeps = 0
    while s.count > 100:
        broker.expire_due()
        sweeps += 1
        assert sweeps < 10
    assert sweeps > 1
    expected = [(9_901 + k, f"k{k}", f"k{k}:99".encode()) for k in range(1, 100)]
    assert kept(broker) == [*expected, (10_001, "k0", b"after")]


def test_the_setting_is_checked(tmp_path: Path) -> None:
    def load(text: str) -> DestinationSettings:
        path = tmp_path / "chute.toml"
        path.write_text(text)
        config = load_config(path)
        return config.destinations[next(iter(config.destinations))]

    found = load('[destinations."stream:s"]\ncleanup = "compact"\ncompact_tombstones = "1h"\n')
    assert (found.cleanup, found.compact_tombstones_ms) == (Cleanup.COMPACT, 3_600_000)
    assert load('[destinations."stream:s"]\nmax_age = "1d"\n').compact_tombstones_ms == DAY
    with pytest.raises(ConfigError, match=re.escape("cleanup: must be one of delete | compact")):
        load('[destinations."stream:s"]\ncleanup = "shrink"\n')
    with pytest.raises(ConfigError, match="applies to streams only"):
        load('[destinations."queue:q"]\ncleanup = "compact"\n')
    with pytest.raises(ConfigError, match="compact_tombstones"):
        load('[destinations."stream:s"]\ncompact_tombstones = 5\n')


def test_each_partition_of_a_compacted_stream_is_compacted(clock: FakeClock) -> None:
    broker = compacted(clock, partitions=2)
    rounds(broker, keys=6, times=3)
    broker.expire_due()
    parts = [broker.streams[S], broker.streams[f"{S}#1"]]
    kept_keys = [[e.message.key for e in p.read(1, p.head)[1]] for p in parts]
    assert sorted(k for keys in kept_keys for k in keys if k) == [f"k{k}" for k in range(6)]
    assert all(len(keys) == len(set(keys)) for keys in kept_keys)  # one per key in each
    assert sum(p.count for p in parts) == 6


def test_a_send_prepared_before_a_restart_and_committed_after_is_kept(clock: FakeClock) -> None:
    broker = compacted(clock)
    send(broker, ("a", b"a1"), ("b", b"b1"))
    tx = BrokerConnection(broker).session(transacted=True)
    tx.send(S, msg(b"a2", key="a"))
    tx.prepare("xid-1")
    send(broker, ("b", b"b2"))
    broker = restart(broker)
    broker.xa.commit("xid-1")  # appended now, and read back as recovered too
    broker.expire_due()
    assert kept(broker) == [(3, "a", b"a2"), (4, "b", b"b2")]
    assert stream_of(broker).count == 2


def firsts(broker: Broker) -> tuple[int, int, int]:
    """The stream's first offset, as its stats say it, and the oldest it keeps."""
    return stream_of(broker).first, stats_of(broker, S)["first"], kept(broker)[0][0]


def test_the_first_offset_stays_where_retention_left_it_across_restarts(
    clock: FakeClock,
) -> None:
    broker = compacted(clock, max_age_ms=10_000)
    send(broker, (None, b"old"))  # 1
    clock.advance(5_000)
    send(broker, ("a", b"a1"), ("b", b"b1"))  # 2, 3
    clock.advance(5_001)
    broker.expire_due()  # age removes 1
    assert firsts(broker) == (2, 2, 2)
    send(broker, ("a", b"a2"))  # 4
    broker.expire_due()  # compaction removes 2: the first offset stays, a gap
    assert firsts(broker) == (2, 2, 3)
    broker = restart(broker)  # not moved to the oldest kept
    assert firsts(broker) == (2, 2, 3)
    clock.advance(5_000)
    broker.expire_due()  # age removes 3 (b1): retention moves it on
    assert firsts(broker) == (4, 4, 4)
    broker = restart(broker)
    assert firsts(broker) == (4, 4, 4)


def test_a_store_without_a_recorded_first_offset_recovers_it_as_before(
    clock: FakeClock,
) -> None:
    broker = compacted(clock)
    send(broker, ("a", b"a1"), ("b", b"b1"), ("a", b"a2"))
    store = broker.store
    assert isinstance(store, MemoryStore)
    assert store.firsts == {S: 1}
    store.firsts.clear()  # what a journal of the previous release recovers
    broker = restart(broker)
    assert firsts(broker) == (1, 1, 1)  # the oldest kept, as it always was
    broker.expire_due()  # compaction removes 1: the first offset is recorded before
    assert store.firsts == {S: 1}
    assert firsts(restart(broker)) == (1, 1, 2)


def test_a_stream_that_is_not_compacted_records_no_first_offset(clock: FakeClock) -> None:
    """Only compaction makes a stream's first offset differ from its oldest message, so
    only a compacted stream has it recorded: a stream at its retention cap would write a
    record at every append."""
    broker = make_broker({S: DestinationSettings(max_messages=3)}, clock=clock)
    send(broker, *[(None, f"m{i}".encode()) for i in range(10)])
    store = broker.store
    assert isinstance(store, MemoryStore)
    assert store.firsts == {}
    assert firsts(restart(broker)) == (8, 8, 8)
