"""Reclaiming: the deletion rule, compaction, and no acked message ever coming back."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, Store
from chute.errors import StoreError
from chute.store.journal import Journal
from chute.store.memory import MemoryStore
from chute.store.reclaim import LiveIndex, Plan, plan

from .conftest import Journals
from .helpers import add, msg, snapshot

# -- the rule, on its own --------------------------------------------------------------


def test_dead_segments_go_and_the_current_one_stays() -> None:
    result = plan([1, 2, 3], 3, live={}, written={1: 5, 2: 5, 3: 5}, deps={})
    assert result == Plan(delete=(1, 2), compact=())


def test_a_segment_with_live_records_stays() -> None:
    result = plan([1, 2, 3], 3, live={1: 1}, written={1: 2}, deps={}, compact_ratio=0)
    assert result.delete == (2,)


def test_an_ack_does_not_go_before_the_add_it_cancels() -> None:
    """Segment 2 holds an ack of an add in 1; 1 still holds a live message."""
    result = plan([1, 2, 3], 3, live={1: 1}, written={1: 2}, deps={2: {1}}, compact_ratio=0)
    assert result.delete == ()


def test_an_ack_goes_with_the_add_it_cancels() -> None:
    result = plan([1, 2, 3], 3, live={}, written={1: 2}, deps={2: {1}})
    assert result.delete == (1, 2)


def test_a_dependency_on_a_deleted_segment_no_longer_holds() -> None:
    result = plan([2, 3], 3, live={}, written={}, deps={2: {1}})
    assert result.delete == (2,)


def test_a_kept_segment_keeps_a_chain() -> None:
    deps = {2: {1}, 3: {2}, 4: {3}}
    result = plan([1, 2, 3, 4, 5], 5, live={1: 3}, written={1: 3}, deps=deps)
    assert result.delete == ()


def test_a_sparse_segment_is_compacted_if_it_can_then_go() -> None:
    result = plan([1, 2, 3], 3, live={1: 1, 2: 5}, written={1: 100, 2: 10}, deps={})
    assert result == Plan(delete=(1,), compact=(1,))


def test_compaction_is_bounded_per_pass() -> None:
    live = {1: 10, 2: 10, 3: 10}
    written = {1: 1000, 2: 1000, 3: 1000}
    result = plan([1, 2, 3, 4], 4, live=live, written=written, deps={}, max_moves=25)
    assert result.compact == (1, 2)


def test_segments_just_closed_settle_before_they_are_compacted() -> None:
    """Segment 2 was closed by the last roll-over: its few live messages are likely being
    consumed right now, so only 1 is compacted; a fully acked segment still goes at once."""
    live = {1: 1, 2: 1}
    written = {1: 100, 2: 100, 3: 100}
    assert plan([1, 2, 3], 3, live=live, written=written, deps={}, settle=1) == Plan(
        delete=(1,), compact=(1,)
    )
    assert plan([1, 2, 3], 3, live={1: 1}, written=written, deps={}, settle=1) == Plan(
        delete=(1, 2), compact=(1,)
    )


def test_a_segment_compaction_would_not_free_is_left_alone() -> None:
    """Segment 2 is sparse but its acks cancel adds in 1, which stays: moving 2's is useless."""
    result = plan([1, 2, 3], 3, live={1: 50, 2: 1}, written={1: 50, 2: 100}, deps={2: {1}})
    assert result == Plan(delete=(), compact=())


# -- the journal -------------------------------------------------------------------------

SMALL = {"segment_size": 8192, "compact_ratio": 0.0}


def fill(journal: Store, first: int, last: int, queue: str = "q") -> None:
    for seq in range(first, last + 1):
        journal.add(add(queue, seq, b"p" * 300))


def test_fully_acked_segments_are_deleted_and_nothing_comes_back(journals: Journals) -> None:
    journal = journals.open(**SMALL)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    fill(journal, 1, 100)
    journal.flush()
    written = journal.segments()
    for seq in range(1, 101):
        journal.ack(AckOp("q", seq))
    journal.reclaim()
    left = journal.segments()
    assert len(left) < len(written)
    journal = journals.reopen(journal, **SMALL)
    recovered = journal.recover()
    assert recovered.messages == {}
    assert recovered.next_seq == {"q": 101}
    assert [d.name for d in recovered.definitions] == ["q"]


def test_an_ack_stays_while_the_segment_of_its_add_stays(journals: Journals) -> None:
    journal = journals.open(**SMALL)
    fill(journal, 1, 20)  # the first segments
    journal.flush()
    first = journal.segments()[0]
    fill(journal, 21, 80)
    for seq in range(2, 81):
        journal.ack(AckOp("q", seq))  # everything but message 1, which pins the first segment
    journal.reclaim()
    assert first in journal.segments()
    journal = journals.reopen(journal, **SMALL)
    assert [s.seq for s in journal.recover().messages["q"]] == [1]
    journal.ack(AckOp("q", 1))
    journal.reclaim()
    assert first not in journal.segments()
    journal = journals.reopen(journal, **SMALL)
    assert journal.recover().messages == {}


def test_a_streams_first_offset_outlives_the_segment_that_recorded_it(
    journals: Journals,
) -> None:
    journal = journals.open(**SMALL)
    journal.define(QueueDefinition("stream:s", QueueKind.STREAM))
    fill(journal, 1, 20, "stream:s")
    journal.stream_first("stream:s", 11)  # retention removed 1-10
    journal.flush()
    holding = journal.segments()[-1]
    fill(journal, 21, 80, "stream:s")
    journal.acks("stream:s", range(1, 61))  # 11-60 by compaction
    journal.reclaim()
    assert holding not in journal.segments()  # the checkpoint carried it on
    for _ in range(2):  # and the open's checkpoint again
        journal = journals.reopen(journal, **SMALL)
        recovered = journal.recover()
        assert recovered.firsts == {"stream:s": 11}
        assert recovered.messages["stream:s"][0].seq == 61
        journal.reclaim()


def test_compaction_moves_a_pinned_message_forward(journals: Journals) -> None:
    journal = journals.open(segment_size=8192, compact_ratio=0.5)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    fill(journal, 1, 20)
    journal.delivered("q", 5, 3)
    journal.flush()
    first = journal.segments()[0]
    for seq in range(1, 21):
        if seq != 5:
            journal.ack(AckOp("q", seq))
    fill(journal, 21, 60)
    result = journal.reclaim()
    assert first not in journal.segments()
    assert first in result.deleted or result.moved == 0  # an earlier automatic pass did it
    journal = journals.reopen(journal, segment_size=8192)
    recovered = journal.recover()
    first_left = recovered.messages["q"][0]
    assert (first_left.seq, first_left.delivery_count) == (5, 3)
    assert [d.name for d in recovered.definitions] == ["q"]
    journal.ack(AckOp("q", 5))
    journal = journals.reopen(journal)
    assert 5 not in [s.seq for s in journal.recover().messages["q"]]


def test_compaction_counts_moves(journals: Journals) -> None:
    journal = journals.open(segment_size=64 * 1024, compact_ratio=0.5)
    fill(journal, 1, 10)
    journal.flush()
    for seq in range(2, 11):
        journal.ack(AckOp("q", seq))
    journal.add(add("r", 1, b"r" * 70_000))  # an oversize record: a new segment, a pass
    result = journal.reclaim()
    assert result.moved == 1
    assert len(result.deleted) == 1


def test_delivery_counts_and_prepared_transactions_survive_reclaiming(
    journals: Journals,
) -> None:
    journal = journals.open(segment_size=8192, compact_ratio=0.5)
    fill(journal, 1, 3)
    journal.prepare("xid", [add("q", 4), AckOp("q", 1)])
    journal.delivered("q", 2, 7)  # a mark in an old segment, its message in the same
    fill(journal, 5, 80, queue="other")
    for seq in range(5, 81):
        journal.ack(AckOp("other", seq))
    journal.reclaim()
    journal = journals.reopen(journal, segment_size=8192)
    recovered = journal.recover()
    assert [(s.seq, s.delivery_count) for s in recovered.messages["q"]] == [(1, 0), (2, 7), (3, 0)]
    assert list(recovered.prepared) == ["xid"]
    journal.commit_prepared("xid")
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == [2, 3, 4]


# -- the model test: random calls, frequent reclaiming, restarts ------------------------


class Model:
    """Random store calls, applied to the journal and a reference MemoryStore alike."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seq: dict[str, int] = {}
        self.live: dict[str, set[int]] = {}
        self.prepared: list[str] = []
        self.xids = 0

    def step(self, stores: list[Store]) -> None:
        rng = self.rng
        queues = ["a", "b", "c"]
        choice = rng.random()
        call: list[tuple[str, tuple[object, ...]]] = []
        if choice < 0.36:
            queue = rng.choice(queues)
            call.append(("add", (self._add(queue),)))
        elif choice < 0.70:
            pairs = [(q, s) for q, held in self.live.items() for s in held]
            if pairs:
                queue, seq = rng.choice(pairs)
                self.live[queue].discard(seq)
                call.append(("ack", (AckOp(queue, seq),)))
        elif choice < 0.78:
            pairs = [(q, s) for q, held in self.live.items() for s in held]
            if pairs:
                queue, seq = rng.choice(pairs)
                call.append(("delivered", (queue, seq, rng.randint(1, 5))))
        elif choice < 0.84:
            ops: list[AddOp | AckOp] = [self._add(rng.choice(queues)) for _ in range(2)]
            pairs = [(q, s) for q, held in self.live.items() for s in held]
            if pairs:
                queue, seq = rng.choice(pairs)
                self.live[queue].discard(seq)
                ops.append(AckOp(queue, seq))
            call.append(("commit", (ops,)))
        elif choice < 0.89:
            self.xids += 1
            xid = f"x{self.xids}"
            self.prepared.append(xid)
            call.append(("prepare", (xid, [self._add(rng.choice(queues), staged=True)])))
        elif choice < 0.93 and self.prepared:
            xid = self.prepared.pop(rng.randrange(len(self.prepared)))
            verb = rng.choice(["commit_prepared", "rollback_prepared"])
            call.append((verb, (xid,)))
        elif choice < 0.96:
            queue = rng.choice(queues)
            call.append(("define", (QueueDefinition(queue, QueueKind.QUEUE),)))
        elif choice < 0.97:
            queue = rng.choice(queues)
            self.live.pop(queue, None)
            call.append(("undefine", (queue,)))
        for name, args in call:
            for store in stores:
                getattr(store, name)(*args)

    def _add(self, queue: str, *, staged: bool = False) -> AddOp:
        seq = self.seq[queue] = self.seq.get(queue, 0) + 1
        if not staged:
            self.live.setdefault(queue, set()).add(seq)
        body = bytes(self.rng.randrange(256) for _ in range(self.rng.choice([10, 200, 900])))
        return AddOp(queue, (queue,), seq, msg(body, id=f"{queue}-{seq}"))


@pytest.mark.parametrize("seed", range(6))
def test_random_calls_recover_like_memory_store(tmp_path: Path, seed: int) -> None:
    model = Model(seed)
    reference = MemoryStore()
    settings = {"segment_size": 4096, "compact_ratio": 0.3, "max_compact_moves": 20}
    journal = Journal(tmp_path, **settings)  # type: ignore[arg-type]
    try:
        for round_ in range(6):
            for _ in range(150):
                model.step([reference, journal])
            if round_ % 2:
                journal.reclaim()
            expected = snapshot(reference.recover())
            assert snapshot(journal.recover()) == expected, f"round {round_} (live)"
            journal.close()
            journal = Journal(tmp_path, **settings)  # type: ignore[arg-type]
            assert snapshot(journal.recover()) == expected, f"round {round_} (reopened)"
            assert journal.report.clean
    finally:
        journal.close()


def test_a_pass_cut_short_between_two_deletions_resurrects_nothing(journals: Journals) -> None:
    """Deleting oldest first keeps the rule at every instant: "crash" after the first unlink.

    Segment A holds adds 1-20; B adds 21-40 and the acks of 1-20; the current
    one the acks of 21-40. A and B go in one pass; B's acks cancel A's adds,
    so had B gone first, a crash in between would bring 1-20 back.
    """
    reference = MemoryStore()
    journal = journals.open(segment_size=8192, compact_ratio=0, auto_reclaim=False)
    for store in (reference, journal):
        fill(store, 1, 20)
    journal.flush()
    a = journal.segments()
    for store in (reference, journal):
        for seq in range(1, 21):
            store.ack(AckOp("q", seq))
        fill(store, 21, 40)
    journal.flush()
    for store in (reference, journal):
        for seq in range(21, 41):
            store.ack(AckOp("q", seq))
        fill(store, 41, 45, queue="other")
    journal.flush()

    def crash_after_first_delete(operation: str) -> None:
        if operation == "sync_directory":  # the sync after an unlink
            raise OSError(5, "simulated crash")

    before = journal.segments()
    journals.disk.hook = crash_after_first_delete
    with pytest.raises(StoreError, match="simulated crash"):
        journal.reclaim()
    journals.disk.hook = None
    gone = set(before) - set(journal.segments())
    journal = journals.reopen(journal)
    assert snapshot(journal.recover()) == snapshot(reference.recover())
    assert gone == {a[0]}  # the oldest went first, then the "crash"
    journal.reclaim()
    journal = journals.reopen(journal)
    assert snapshot(journal.recover()) == snapshot(reference.recover())


def test_a_committed_run_is_indexed_as_each_of_its_adds() -> None:
    q = "stream:s"
    runs: list[list[AddOp | AckOp]] = [
        [add(q, seq) for seq in range(1, 50)],
        [add(q, seq) for seq in range(50, 52)],
    ]
    runs.append([add(q, 60), add(q, 61), AckOp(q, 3), add(q, 62), add(q, 63), add(q, 64)])
    runs.append([add(q, seq) for seq in range(100, 120)])  # after a gap
    at_once, each = LiveIndex(), LiveIndex()
    for n, ops in enumerate(runs, 1):
        at_once.commit(ops, n << 32 | 100)
        for op in ops:
            each.commit([op], n << 32 | 100)
    assert dict(at_once.locations[q].items()) == dict(each.locations[q].items())
    assert (at_once.live, at_once.written, at_once.next_seq, at_once.deps) == (
        each.live,
        each.written,
        each.next_seq,
        each.deps,
    )
