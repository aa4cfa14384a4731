"""Record payloads: every record decodes to what was encoded; bad payloads raise CorruptRecord."""

from __future__ import annotations

import contextlib

import pytest

from chute.content import encode_content
from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind
from chute.store.errors import CorruptRecord
from chute.store.heads import AddHead, add_keys, op_add_keys, op_heads
from chute.store.payload import Names
from chute.store.record import Kind
from chute.store.records import (
    AckRecord,
    AcksRecord,
    AddRecord,
    CheckpointRecord,
    CommitPreparedRecord,
    CommitRecord,
    DefineRecord,
    DeliveredRecord,
    FirstRecord,
    MarksRecord,
    PrepareRecord,
    Record,
    RollbackPreparedRecord,
    SentRecord,
    UndefineRecord,
    decode,
    encode,
)

from .helpers import describe, msg, rich_message

ADD = AddOp("topic:t", ("s1", "s2"), 41, rich_message())
RUN = tuple(  # a stream's batch: one BATCH operation
    AddOp("stream:é", ("stream:é",), 7 + i, msg(b"b" * i, id=f"b{i}", timestamp=i, expiration=i))
    for i in range(5)
)

RECORDS: list[Record] = [
    AddRecord(AddOp("q", ("q",), 1, msg(b"hello", id="m1", timestamp=5, expiration=9))),
    AddRecord(ADD, 3),
    AckRecord(AckOp("q", 1 << 40)),
    DeliveredRecord("q", 2, 7),
    AcksRecord("q-é", (1, 2, 1 << 40)),
    MarksRecord("q", (5, 9), (1, 1 << 31)),
    DefineRecord(QueueDefinition("q", QueueKind.QUEUE)),
    DefineRecord(QueueDefinition("s", QueueKind.SUBSCRIPTION, "topic:t", "x = 'é'" * 100)),
    DefineRecord(QueueDefinition("c", QueueKind.CALLBACK, "topic:t", None, "queue:q")),
    DefineRecord(QueueDefinition("o", QueueKind.SUBSCRIPTION, "topic:t", None, None, "alice")),
    *(DefineRecord(QueueDefinition(kind.value, kind, selector="{}")) for kind in QueueKind),
    UndefineRecord("q"),
    CommitRecord((ADD, AckOp("q", 1), AddOp("q", ("q",), 2, msg(b"2")))),
    CommitRecord(()),
    CommitRecord(RUN),
    CommitRecord((AckOp("q", 1), *RUN[:2], ADD, *RUN[2:], AckOp("stream:é", 3))),
    PrepareRecord("xid-batch", RUN),
    CommitPreparedRecord("xid-batch", RUN),
    PrepareRecord("xid-é", (ADD, AckOp("q", 1))),
    CommitPreparedRecord("xid", (AckOp("q", 1),)),
    RollbackPreparedRecord("xid"),
    CheckpointRecord((("q", 8), ("topic:t", 42)), (("s1", 41, 3),)),
    CheckpointRecord((), ()),
    CheckpointRecord((("q", 8),), (), ((1, 1), (4, 9), (12, 12))),
    CheckpointRecord((("q", 8),), (), ((1, 2),), (("stream:é", 1 << 40), ("stream:s", 1))),
    CheckpointRecord((), (), (), (("stream:s", 7),)),
    SentRecord("alice\x00producer-é", "0192a3b4c5d6e7f8a9b0c1d2e3f40516"),
    FirstRecord("stream:é", 1 << 40),
]


def comparable(record: Record) -> object:
    """Records hold Messages, whose == ignores property types: compare descriptions."""
    if isinstance(record, AddRecord):
        return ("add", record.op.destination, record.op.queues, record.op.seq,
                describe(record.op.message), record.delivery_count)  # fmt: skip
    if isinstance(record, CommitRecord | PrepareRecord | CommitPreparedRecord):
        ops = [describe(op.message) if isinstance(op, AddOp) else op for op in record.ops]
        return (type(record).__name__, getattr(record, "xid", None), ops)
    return record


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_round_trip(record: Record) -> None:
    kind, payload = encode(record)
    data = b"pad" + payload + b"trailing"
    decoded = decode(kind, data, 3, 3 + len(payload), Names())
    assert comparable(decoded) == comparable(record)


def test_add_keys_reads_seq_and_queues_only() -> None:
    _, payload = encode(AddRecord(ADD))
    assert add_keys(payload, 0, Names()) == (41, ["s1", "s2"])


def test_a_cached_wire_encoding_is_used_as_is() -> None:
    m = msg(b"body", id="cached")
    m.encoded = encode_content(m)
    _, with_cache = encode(AddRecord(AddOp("q", ("q",), 1, m)))
    m.encoded = None
    _, without = encode(AddRecord(AddOp("q", ("q",), 1, m)))
    assert with_cache == without


def test_a_stored_message_keeps_its_content_block_for_delivery() -> None:
    kind, payload = encode(AddRecord(ADD))
    record = decode(kind, payload, 0, len(payload), Names())
    assert isinstance(record, AddRecord)
    stored = record.op.message
    assert stored.encoded == encode_content(rich_message())  # sent on as is, not re-encoded
    assert describe(stored) == describe(rich_message())


def test_names_are_shared_between_records() -> None:
    names = Names()
    kind, payload = encode(AckRecord(AckOp("queue-name", 1)))
    a = decode(kind, payload, 0, len(payload), names)
    b = decode(kind, payload, 0, len(payload), names)
    assert isinstance(a, AckRecord)
    assert isinstance(b, AckRecord)
    assert a.op.queue is b.op.queue


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_truncated_payloads_raise_corrupt_record_only(record: Record) -> None:
    kind, payload = encode(record)
    for cut in range(len(payload)):
        with contextlib.suppress(CorruptRecord):
            decode(kind, payload[:cut], 0, cut, Names())


def test_an_unknown_kind_is_corrupt() -> None:
    with pytest.raises(CorruptRecord, match="unknown record kind"):
        decode(99, b"", 0, 0, Names())


@pytest.mark.parametrize(
    "record", [AcksRecord("q", (1, 2)), MarksRecord("q", (1, 2), (3, 4))], ids=repr
)
def test_gathered_entries_must_fill_the_record(record: Record) -> None:
    kind, payload = encode(record)
    for bad in (payload + b"x", payload[:-1]):
        with pytest.raises(CorruptRecord, match="do not fill"):
            decode(kind, bad, 0, len(bad), Names())


def test_operations_must_fill_the_record() -> None:
    kind, payload = encode(CommitRecord((AckOp("q", 1),)))
    with pytest.raises(CorruptRecord):
        decode(kind, payload + b"x", 0, len(payload) + 1, Names())
    assert kind == Kind.COMMIT


@pytest.mark.parametrize(
    "record",
    [r for r in RECORDS if isinstance(r, CommitRecord | CommitPreparedRecord)],
    ids=lambda r: type(r).__name__,
)
def test_the_readers_of_a_transaction_walk_the_same_operations(
    record: CommitRecord | CommitPreparedRecord,
) -> None:
    kind, payload = encode(record)
    end = len(payload)
    adds = [(op.seq, op.queues) for op in record.ops if isinstance(op, AddOp)]
    heads = op_heads(kind, payload, 0, end, Names())
    assert [(h.seq, h.queues) for h in heads if isinstance(h, AddHead)] == adds
    assert [h for h in heads if isinstance(h, AckOp)] == [
        op for op in record.ops if isinstance(op, AckOp)
    ]
    keys = op_add_keys(kind, payload, 0, end, Names())
    assert [(seq, tuple(queues)) for seq, queues, _, _, _ in keys] == adds
    # a byte past the operations: recovery refuses the record, while reclaiming and
    # paging still find its adds (a damaged record holding no live add is skipped)
    longer = payload + b"x"
    with pytest.raises(CorruptRecord, match="do not fill"):
        op_heads(kind, longer, 0, end + 1, Names())
    with pytest.raises(CorruptRecord, match="do not fill"):
        decode(kind, longer, 0, end + 1, Names())
    assert op_add_keys(kind, longer, 0, end + 1, Names()) == keys


def test_a_sent_record_whose_id_overruns_it_is_corrupt() -> None:
    kind, payload = encode(SentRecord("p", "id"))
    with pytest.raises(CorruptRecord):
        decode(kind, payload + b"x", 0, len(payload) - 1, Names())
