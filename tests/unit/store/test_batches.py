"""Record batches: what arrives together for one queue (a stream's ``send_many``, a prepared
chunk) is one BATCH operation in its transaction's record, and every reader of the journal
(recovery, paging, stream reads, compaction, prepared transactions) takes it apart exactly
where it must."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from chute.content import encode_content
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, TxOp
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.store.errors import CorruptRecord
from chute.store.heads import op_add_keys, queue_blocks
from chute.store.journal import Journal
from chute.store.payload import Names, encode_add, encode_ops
from chute.store.record import Kind, Scan
from chute.store.records import CommitRecord, decode
from chute.store.recovery import recover
from chute.store.segment import SEGMENT_HEADER_SIZE, list_segments, segment_path

from .conftest import Journals
from .helpers import count_decodes, describe, msg

S = "stream:s"


def run(first: int, count: int, queue: str = S, size: int = 100) -> list[AddOp]:
    return [
        AddOp(
            queue,
            (queue,),
            seq,
            msg(bytes([seq % 251]) * size, id=f"{queue}-{seq}", timestamp=seq, expiration=0),
        )
        for seq in range(first, first + count)
    ]


def entries(payload: bytes, head: int = 0) -> int:
    """How many operations an ``ops`` payload holds (a batch is one)."""
    return int(struct.unpack_from(">I", payload, head)[0])


def test_a_run_of_new_messages_is_one_operation_and_smaller() -> None:
    ops = run(1, 100)
    payload = encode_ops(ops)
    assert entries(payload) == 1
    per_message = sum(5 + len(encode_add(op)) for op in ops)
    assert len(payload) < per_message - 35 * len(ops)  # 20 bytes a message, not 60


def test_a_batch_ends_where_the_run_breaks() -> None:
    redelivered = run(20, 1)[0]
    redelivered.message.redelivered = True
    redelivered.message.delivery_count = 2
    ops: list[TxOp] = [
        *run(1, 3),  # a batch
        AckOp(S, 1),
        *run(4, 2),  # a batch: the ack between breaks the run
        *run(7, 2),  # a gap in the numbers: another
        *run(9, 1, queue="queue:q"),  # another route, alone: an add
        *run(10, 3),
        redelivered,  # not new: an add of its own
    ]
    payload = encode_ops(ops)
    assert entries(payload) == 7
    record = decode(Kind.COMMIT, payload, 0, len(payload), Names())
    assert isinstance(record, CommitRecord)
    assert _described(record.ops) == _described(ops)
    keys = op_add_keys(Kind.COMMIT, payload, 0, len(payload), Names())
    assert [(seq, queues) for seq, queues, _, _, _ in keys] == [
        (op.seq, list(op.queues)) for op in ops if isinstance(op, AddOp)
    ]
    assert [times is None for *_, times in keys] == [False] * 7 + [True] + [False] * 3 + [True]


def _described(ops: object) -> list[object]:
    assert isinstance(ops, list | tuple)
    return [describe(op.message) if isinstance(op, AddOp) else op for op in ops]


def _records(directory: Path) -> list[tuple[int, int]]:
    """(kind, operations) of every transaction record in the journal's segments (none for
    a COMMIT_IN_PLACE: its xid is all it holds)."""
    out = []
    for number in list_segments(str(directory)):
        data = Path(segment_path(str(directory), number)).read_bytes()
        for _, kind, start, end in Scan(data, number, SEGMENT_HEADER_SIZE):
            if kind == Kind.COMMIT:
                out.append((kind, entries(data, start)))
            elif kind in (Kind.PREPARE, Kind.COMMIT_PREPARED):
                (length,) = struct.unpack_from(">H", data, start)
                out.append((kind, entries(data, start + 2 + length)))
            elif kind == Kind.COMMIT_IN_PLACE:
                (length,) = struct.unpack_from(">H", data, start)
                assert end == start + 2 + length
                out.append((kind, 0))
    return out


def stream_journal(journals: Journals, **settings: object) -> Journal:
    journal = journals.open(sync="never", **settings)
    journal.define(QueueDefinition(S, QueueKind.STREAM))
    return journal


def test_a_batch_is_read_back_from_any_message_of_it(journals: Journals) -> None:
    journal = stream_journal(journals)
    ops = run(1, 50)
    journal.commit(ops)
    journal.flush()
    assert _records(journals.directory) == [(Kind.COMMIT, 1)]
    for after, limit in ((0, 50), (17, 5), (48, 10), (49, 1), (50, 3)):
        want = ops[after : after + limit]
        got = journal.page_in(S, after, limit)
        assert [(m.seq, describe(m.message), m.delivery_count) for m in got] == [
            (op.seq, describe(op.message), 0) for op in want
        ]
        blocks = journal.page_blocks(S, after, limit)
        assert [(b[0], b[3], bytes(b[5]), b[6]) for b in blocks] == [
            (op.seq, op.message.timestamp, encode_content(op.message), op.message.size)
            for op in want
        ]


def test_a_batch_partly_acked_comes_back_without_those_and_moves_when_compacted(
    journals: Journals,
) -> None:
    journal = stream_journal(journals, segment_size=16 << 10, compact_ratio=0.5)
    ops = run(1, 40)
    journal.commit(ops)
    journal.acks(S, list(range(1, 31)))  # retention cut the batch after its 30th message
    journal.flush()
    journal = journals.reopen(journal, sync="never", segment_size=16 << 10, compact_ratio=0.5)
    kept = [(op.seq, describe(op.message)) for op in ops[30:]]
    recovered = journal.recover().messages[S]
    assert [(m.seq, describe(m.message)) for m in recovered] == kept
    first = list_segments(str(journals.directory))[0]
    for i in range(2):  # fill segments past the batch's so that a pass may compact it
        journal.commit(run(1, 60, queue=f"queue:filler{i}"))
        journal.acks(f"queue:filler{i}", list(range(1, 61)))
    journal.flush()
    journal.reclaim()
    assert first not in list_segments(str(journals.directory))  # its live part moved on
    assert [(m.seq, describe(m.message)) for m in journal.page_in(S, 0, 100)] == kept
    journal = journals.reopen(journal, sync="never", segment_size=16 << 10)
    assert [(m.seq, describe(m.message)) for m in journal.recover().messages[S]] == kept


def test_a_prepared_batch_survives_a_restart_whole_then_commits(journals: Journals) -> None:
    journal = stream_journal(journals)
    ops = run(1, 30)
    journal.prepare("xid-1", ops)
    journal.flush()
    journal = journals.reopen(journal, sync="never")
    recovered = journal.recover()
    assert _described(recovered.prepared["xid-1"]) == _described(ops)
    journal.commit_prepared("xid-1")
    journal.flush()
    journal = journals.reopen(journal, sync="never")
    recovered = journal.recover()
    assert recovered.prepared == {}
    assert [(m.seq, describe(m.message)) for m in recovered.messages[S]] == [
        (op.seq, describe(op.message)) for op in ops
    ]
    assert [entry for entry in _records(journals.directory)] == [
        (Kind.PREPARE, 1),
        (Kind.COMMIT_IN_PLACE, 0),  # the messages are written once, in the PREPARE
    ]


def _fill(journal: Journal, times: int, tag: str) -> None:
    """Records that roll the journal past a segment or two and keep nothing alive."""
    for i in range(times):
        queue = f"queue:{tag}{i}"
        journal.commit(run(1, 60, queue=queue))
        journal.acks(queue, list(range(1, 61)))


def test_a_commit_in_place_is_kept_as_long_as_its_prepare_and_both_go_together(
    journals: Journals,
) -> None:
    journal = stream_journal(journals, segment_size=16 << 10)
    ops = run(1, 30)
    journal.prepare("xid-1", ops)
    journal.flush()
    prepared_in = list_segments(str(journals.directory))[-1]
    _fill(journal, 2, "before")
    journal.commit_prepared("xid-1")
    _fill(journal, 3, "after")  # the commit's segment holds nothing live any more
    journal.flush()
    journal.reclaim()
    segments = list_segments(str(journals.directory))
    assert prepared_in in segments
    assert (Kind.COMMIT_IN_PLACE, 0) in _records(journals.directory)  # kept with its PREPARE
    journal = journals.reopen(journal, sync="never", segment_size=16 << 10)
    recovered = journal.recover()
    assert recovered.prepared == {}  # committed, not back in doubt
    want = [(op.seq, describe(op.message)) for op in ops]
    assert [(m.seq, describe(m.message)) for m in recovered.messages[S]] == want
    assert [(b[0], bytes(b[5])) for b in journal.page_blocks(S, 0, 100)] == [
        (op.seq, encode_content(op.message)) for op in ops
    ]  # a stream's read slices the blocks out of the PREPARE
    journal.acks(S, [op.seq for op in ops])
    _fill(journal, 2, "again")
    journal.flush()
    journal.reclaim()
    assert prepared_in not in list_segments(str(journals.directory))
    assert (Kind.COMMIT_IN_PLACE, 0) not in _records(journals.directory)
    journal = journals.reopen(journal, sync="never", segment_size=16 << 10)
    recovered = journal.recover()
    assert recovered.prepared == {}
    assert recovered.messages.get(S, []) == []


def test_a_prepare_committed_in_place_and_mostly_acked_is_compacted(
    journals: Journals,
) -> None:
    journal = stream_journal(journals, segment_size=16 << 10, compact_ratio=0.5)
    ops = run(1, 40)
    journal.prepare("xid-1", ops)
    journal.commit_prepared("xid-1")
    journal.acks(S, list(range(1, 31)))
    journal.flush()
    first = list_segments(str(journals.directory))[0]
    _fill(journal, 2, "filler")
    journal.flush()
    journal.reclaim()
    assert first not in list_segments(str(journals.directory))  # its live part moved on
    kept = [(op.seq, describe(op.message)) for op in ops[30:]]
    assert [(m.seq, describe(m.message)) for m in journal.page_in(S, 0, 100)] == kept
    journal = journals.reopen(journal, sync="never", segment_size=16 << 10)
    recovered = journal.recover()
    assert recovered.prepared == {}
    assert [(m.seq, describe(m.message)) for m in recovered.messages[S]] == kept


def test_send_many_to_a_stream_is_one_batch_read_from_any_offset(tmp_path: Path) -> None:
    settings = SettingsResolver({S: DestinationSettings(max_messages=25)})
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    broker = Broker(journal, settings)
    broker.recover()
    session = BrokerConnection(broker).session()
    sent = [Message.create(f"m{i}".encode() * 20) for i in range(20)]
    session.send_many(S, sent[:10])
    session.send_many(S, sent[10:])  # retention (25) cuts the first batch: nothing yet
    stream = broker.streams[S]
    journal.flush()
    journal.close()
    assert _records(tmp_path).count((Kind.COMMIT, 1)) == 2
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    broker = Broker(journal, settings)
    broker.recover()
    try:
        stream = broker.streams[S]
        assert (stream.first, stream.head) == (1, 21)
        for start in (1, 5, 10, 11, 19):
            _, got = stream.read(start, stream.head, max_messages=4)
            assert [e.message.body for e in got] == [m.body for m in sent[start - 1 : start + 3]]
            _, blocks = stream.read_blocks(start, stream.head, max_messages=4)
            assert [b[0] for b in blocks] == list(range(start, min(start + 4, 21)))
    finally:
        journal.close()


def test_a_cut_batch_is_a_corrupt_record_to_every_reader() -> None:
    ops = run(1, 4)
    ops[1].message.properties["p"] = "v"  # one sized from its properties
    payload = encode_ops(ops)
    assert queue_blocks(Kind.COMMIT, payload, 0, len(payload), S).seqs() == {1, 2, 3, 4}
    for cut in range(len(payload)):
        data = payload[:cut]
        with pytest.raises(CorruptRecord):
            queue_blocks(Kind.COMMIT, data, 0, cut, S)
        with pytest.raises(CorruptRecord):
            op_add_keys(Kind.COMMIT, data, 0, cut, Names())
        with pytest.raises(CorruptRecord):
            decode(Kind.COMMIT, data, 0, cut, Names())


def test_recovery_indexes_a_committed_batch_without_decoding_its_messages(
    journals: Journals, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = stream_journal(journals, segment_size=16 << 20)
    ops = run(1, 5000, size=1000)
    journal.commit(ops)
    journal.close()
    decoded = count_decodes(monkeypatch)
    journal = journals.open(sync="never", segment_size=16 << 20)
    recovered = journal.recover()
    window = recovered.messages[S]
    assert [m.seq for m in window] == list(range(1, len(window) + 1))
    assert decoded() == len(window) < 2000  # the window read back, not the whole batch
    rest = ops[len(window) :]
    assert recovered.paged[S] == (len(rest), sum(op.message.size for op in rest))


def test_a_topic_s_batch_to_two_subscriptions_is_read_and_acked_for_each(
    journals: Journals,
) -> None:
    journal = journals.open(sync="never")
    for name in ("s1", "s2"):
        journal.define(QueueDefinition(name, QueueKind.SUBSCRIPTION, "topic:t"))
    ops = [
        AddOp("topic:t", ("s1", "s2"), seq, msg(f"t{seq}".encode(), id=f"t{seq}"))
        for seq in range(1, 11)
    ]
    assert entries(encode_ops(ops)) == 1  # one batch for both subscriptions
    journal.commit(ops)
    journal.acks("s1", list(range(1, 8)))
    journal.flush()
    assert [m.seq for m in journal.page_in("s1", 0, 20)] == [8, 9, 10]
    assert [m.message.body for m in journal.page_in("s2", 3, 2)] == [b"t4", b"t5"]
    assert [b[0] for b in journal.page_blocks("s2", 0, 20)] == list(range(1, 11))
    journal = journals.reopen(journal, sync="never")
    recovered = journal.recover()
    assert [m.seq for m in recovered.messages["s1"]] == [8, 9, 10]
    assert [m.message.id for m in recovered.messages["s2"]] == [f"t{s}" for s in range(1, 11)]
    assert recovered.next_seq["topic:t"] == 11


def test_a_batch_torn_anywhere_is_recovered_not_at_all_and_what_came_before_whole(
    tmp_path: Path,
) -> None:
    # a kill -9 mid-write: the segment ends inside the batch's record (every 97th byte of
    # it, with or without a zero-filled rest): none of the batch, every message before it
    original = tmp_path / "original"
    with Journal(original, sync="never", segment_size=64 << 10, preallocate=False) as journal:
        journal.define(QueueDefinition(S, QueueKind.STREAM))
        journal.commit(run(1, 20))
        journal.commit(run(21, 30))
    [number] = list_segments(str(original))
    path = Path(segment_path(str(original), number))
    data = path.read_bytes()
    spans = [(offset, end) for offset, _, _, end in Scan(data, number, SEGMENT_HEADER_SIZE)]
    start, end = spans[-1]
    work = tmp_path / "work"
    work.mkdir()
    torn = work / path.name
    for cut in range(start, end, 97):
        for rest in (b"", bytes(end - cut)):
            torn.write_bytes(data[:cut] + rest)
            recovered, report = recover(str(work))
            assert [m.seq for m in recovered.messages[S]] == list(range(1, 21)), cut
            assert report.bytes_cut == len(data[start:cut].rstrip(b"\x00"))
            assert recovered.next_seq[S] == 21
