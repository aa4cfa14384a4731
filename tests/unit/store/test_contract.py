"""The store contract: the same calls give the same recovery from MemoryStore and Journal.

Every test drives the store under test and a reference MemoryStore with the
same calls, restarts the store under test (for the journal: close, open
again, replay the segments), and compares what ``recover`` returns.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, Store
from chute.store.memory import MemoryStore

from .conftest import Harness
from .helpers import add, msg, rich_message, snapshot

Scenario = Callable[[Store], None]


def check(harness: Harness, scenario: Scenario) -> None:
    reference = MemoryStore()
    scenario(reference)
    scenario(harness.store)
    expected = snapshot(reference.recover())
    assert snapshot(harness.store.recover()) == expected  # before the restart too
    assert snapshot(harness.reopen().recover()) == expected


def test_nothing_recovers_nothing(harness: Harness) -> None:
    check(harness, lambda store: None)


def test_adds_come_back_in_seq_order_without_the_acked(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        for seq in (1, 2, 3, 5, 4):
            store.add(add("q", seq))
        store.ack(AckOp("q", 2))
        store.ack(AckOp("q", 4))

    check(harness, scenario)
    assert [s.seq for s in harness.store.recover().messages["q"]] == [1, 3, 5]


def test_a_cumulative_ack_acks_each_message(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        for seq in range(1, 8):
            store.add(add("q", seq))
        store.acks("q", [1, 3, 5])
        store.acks("q", [])
        store.acks("elsewhere", [1])

    check(harness, scenario)
    assert [s.seq for s in harness.store.recover().messages["q"]] == [2, 4, 6, 7]


def test_marks_of_many_messages_in_one_call(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        for seq in range(1, 5):
            store.add(add("q", seq))
        store.delivered_many("q", [1, 2, 9], [1, 3, 1])
        store.delivered_many("q", [], [])

    check(harness, scenario)
    counts = [(s.seq, s.delivery_count) for s in harness.store.recover().messages["q"]]
    assert counts == [(1, 1), (2, 3), (3, 0), (4, 0)]


def test_every_message_field_survives(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.add(AddOp("q", ("q",), 1, rich_message()))
        store.add(AddOp("q", ("q",), 2, msg(b"", id="empty", persistent=False)))
        store.add(AddOp("q", ("q",), 3, msg(b"x" * 100_000, id="big")))

    check(harness, scenario)


def test_definitions_of_every_kind_and_redefinition(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.define(QueueDefinition("sub", QueueKind.SUBSCRIPTION, "topic:t", "a > 1"))
        store.define(QueueDefinition("cb", QueueKind.CALLBACK, "topic:t", None, "queue:q"))
        store.define(QueueDefinition("sub", QueueKind.SUBSCRIPTION, "topic:t", "a > 2"))
        store.define(QueueDefinition("made", QueueKind.QUEUE, owner="alice"))  # its maker
        store.define(QueueDefinition("anonymous", QueueKind.QUEUE, owner=""))

    check(harness, scenario)
    owners = {d.name: d.owner for d in harness.reopen().recover().definitions}
    assert (owners["q"], owners["made"], owners["anonymous"]) == (None, "alice", "")


def test_undefine_forgets_the_queue_and_its_messages(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.define(QueueDefinition("keep", QueueKind.QUEUE))
        store.add(add("q", 1))
        store.add(add("keep", 1))
        store.undefine("q")
        store.undefine("never-defined")

    check(harness, scenario)
    assert "q" not in harness.store.recover().messages


def test_a_queue_defined_again_after_undefine_starts_empty(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.add(add("q", 1))
        store.undefine("q")
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.add(add("q", 2))

    check(harness, scenario)


def test_topic_fan_out_is_one_add_acked_per_subscription(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        for name in ("s1", "s2", "s3"):
            store.define(QueueDefinition(name, QueueKind.SUBSCRIPTION, "topic:t"))
        store.add(AddOp("topic:t", ("s1", "s2", "s3"), 1, msg(b"fan")))
        store.add(AddOp("topic:t", ("s1", "s3"), 2, msg(b"fan2")))
        store.ack(AckOp("s2", 1))
        store.ack(AckOp("s3", 2))

    check(harness, scenario)


def test_delivery_counts_keep_the_highest_and_ignore_unknown_messages(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.add(add("q", 1))
        store.add(add("q", 2))
        store.delivered("q", 1, 2)
        store.delivered("q", 1, 1)
        store.delivered("q", 3, 5)  # no such message
        store.delivered("nope", 1, 5)

    check(harness, scenario)
    assert [s.delivery_count for s in harness.store.recover().messages["q"]] == [2, 0]


def test_a_delivery_count_dies_with_its_message(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.add(add("q", 1))
        store.delivered("q", 1, 4)
        store.ack(AckOp("q", 1))
        store.add(add("q", 1))  # the same seq again (a diverted message coming back)

    check(harness, scenario)


def test_next_seq_survives_every_message_being_acked(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.add(add("q", 7))
        store.add(add("s", 41, destination="topic:t"))
        store.ack(AckOp("q", 7))
        store.ack(AckOp("s", 41))

    check(harness, scenario)
    assert harness.store.recover().next_seq == {"q": 8, "topic:t": 42}


def test_a_streams_first_offset_is_the_last_recorded_until_it_is_undefined(
    harness: Harness,
) -> None:
    def scenario(store: Store) -> None:
        for name in ("stream:s", "stream:gone"):
            store.define(QueueDefinition(name, QueueKind.STREAM))
            store.stream_first(name, 1)
            for seq in range(1, 6):
                store.add(add(name, seq))
        store.acks("stream:s", [1, 2])
        store.stream_first("stream:s", 3)  # retention removed 1 and 2
        store.acks("stream:s", [3, 4])  # compaction: the first offset stays
        store.undefine("stream:gone")

    check(harness, scenario)
    recovered = harness.store.recover()
    assert recovered.firsts == {"stream:s": 3}
    assert [s.seq for s in recovered.messages["stream:s"]] == [5]


def test_a_local_commit_applies_its_adds_and_acks(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.add(add("q", 1))
        store.add(add("q", 2))
        store.commit([add("q", 3), AckOp("q", 1), add("r", 1), AckOp("r", 1)])
        store.commit([add("q", 4)])
        store.commit([AckOp("q", 2)])
        store.commit([])

    check(harness, scenario)


def test_a_prepared_transaction_survives_a_restart(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.add(add("q", 1))
        store.prepare("xid-1", [add("q", 2), AckOp("q", 1)])
        store.prepare("xid-2", [add("r", 1)])

    check(harness, scenario)
    prepared = harness.store.recover().prepared
    assert set(prepared) == {"xid-1", "xid-2"}


def test_prepared_transactions_commit_and_roll_back_after_a_restart(harness: Harness) -> None:
    reference = MemoryStore()
    for store in (reference, harness.store):
        store.add(add("q", 1))
        store.prepare("commit-me", [add("q", 2), AckOp("q", 1)])
        store.prepare("roll-me-back", [add("q", 3)])
    store = harness.reopen()
    for s in (reference, store):
        s.recover()
        s.commit_prepared("commit-me")
        s.rollback_prepared("roll-me-back")
        s.commit_prepared("unknown")
        s.rollback_prepared("unknown")
    expected = snapshot(reference.recover())
    assert snapshot(store.recover()) == expected
    recovered = harness.reopen().recover()
    assert snapshot(recovered) == expected
    assert [s.seq for s in recovered.messages["q"]] == [2]


def test_a_transaction_prepared_and_committed_in_one_run_is_recovered_committed(
    harness: Harness,
) -> None:
    def scenario(store: Store) -> None:
        store.add(add("q", 1))
        store.prepare("xid-1", [add("q", 2), AckOp("q", 1), add("r", 1)])
        store.prepare("xid-2", [add("q", 3)])
        store.prepare("xid-2", [add("q", 4)])  # replaced: the commit records this one
        store.commit_prepared("xid-1")
        store.commit_prepared("xid-2")

    check(harness, scenario)
    recovered = harness.reopen().recover()
    assert recovered.prepared == {}
    assert [s.seq for s in recovered.messages["q"]] == [2, 4]


def test_preparing_the_same_xid_again_replaces_it(harness: Harness) -> None:
    def scenario(store: Store) -> None:
        store.prepare("x", [add("q", 1)])
        store.prepare("x", [add("q", 2)])

    check(harness, scenario)


@pytest.mark.parametrize("restarts", [1, 3])
def test_state_built_over_several_restarts(harness: Harness, restarts: int) -> None:
    reference = MemoryStore()
    seq = 0
    for round_ in range(restarts):
        for s in (reference, harness.store):
            s.recover()
            s.define(QueueDefinition("q", QueueKind.QUEUE))
            for i in range(5):
                s.add(add("q", seq + i + 1))
            s.ack(AckOp("q", seq + 1))
            s.delivered("q", seq + 2, round_ + 1)
        seq += 5
        harness.reopen()
    assert snapshot(harness.store.recover()) == snapshot(reference.recover())


def test_a_clusters_ledger_survives_with_the_message_it_was_committed_with(
    harness: Harness,
) -> None:
    """A ledger (chute.core.rules.cluster) is a queue of its own kind: its records come back
    with their definition, and a commit of a message with its ledger record is atomic."""

    def scenario(store: Store) -> None:
        store.define(QueueDefinition("q", QueueKind.QUEUE))
        store.define(QueueDefinition("cluster.in:b", QueueKind.LEDGER))
        store.commit([add("q", 1), add("cluster.in:b", 1)])
        store.commit([add("q", 2), add("cluster.in:b", 2)])
        store.ack(AckOp("cluster.in:b", 1))

    check(harness, scenario)
    recovered = harness.reopen().recover()
    kinds = {d.name: d.kind for d in recovered.definitions}
    assert kinds["cluster.in:b"] is QueueKind.LEDGER
    assert [s.seq for s in recovered.messages["cluster.in:b"]] == [2]


def test_sent_ids_come_back_in_the_order_written(harness: Harness) -> None:
    store = harness.store
    store.define(QueueDefinition("q", QueueKind.QUEUE))
    store.add(add("q", 1))
    store.sent("producer-1", "m-1")
    store.ack(AckOp("q", 1))  # what it named is gone; the id is still known
    store.sent("producer-2", "m-1")
    store.sent("producer-1", "m-2")
    store = harness.reopen()
    assert store.recover().sent == [
        ("producer-1", "m-1"),
        ("producer-2", "m-1"),
        ("producer-1", "m-2"),
    ]
