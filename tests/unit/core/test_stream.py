"""Streams (chute.core.model.stream): an append-only log kept by retention, read from an offset."""

from __future__ import annotations

import pytest

from chute.core.model import stream as stream_module
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.offsets import Offset, parse_offset
from chute.core.model.readers import WINDOW, StreamReader
from chute.core.model.settings import DestinationSettings
from chute.core.model.stream import Stream
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.operations.stats import stream_stats
from chute.core.rules.broker import Broker
from chute.errors import ChuteError, ConsumerError, DestinationDeleted, TransactionError
from chute.message import Message

from .helpers import (
    FakeClock,
    Recorder,
    bodies,
    make_broker,
    memory,
    msg,
    restart,
    stats_of,
    stored,
)

S = "stream:s"


def stream_of(broker: Broker, address: str = S) -> Stream:
    found = broker.streams[address]
    assert isinstance(found, Stream)
    return found


def append(broker: Broker, n: int, address: str = S, start: int = 0, **fields: object) -> None:
    session = BrokerConnection(broker).session()
    for i in range(start, start + n):
        session.send(address, msg(f"m{i}", **fields))


def names(n: int, start: int = 0) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, start + n)]


def with_settings(clock: FakeClock, **settings: int) -> Broker:
    return make_broker({S: DestinationSettings(**settings)}, clock=clock)  # type: ignore[arg-type]


class Closer(Recorder):
    """A receiver that is told when the broker closes its consumer, and closes it as a
    driver does."""

    def __init__(self, session: BrokerSession) -> None:
        super().__init__()
        self.session = session
        self.errors: list[ChuteError] = []

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        self.errors.append(error)
        self.session.close_consumer(consumer)


class Reading(Recorder):
    """A Recorder that also keeps every entry :func:`pump` took from it."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[Entry] = []

    @property
    def seqs(self) -> list[int]:
        return [e.seq for e in self.got]

    @property
    def got_bodies(self) -> list[bytes]:
        return bodies(self.got)


def read_all(
    session: BrokerSession,
    consumer_id: int = 1,
    offset: str | int | None = "first",
    *,
    prefetch: int = 10,
    selector: str | None = None,
) -> tuple[BrokerConsumer, Reading]:
    """A client-ack reader that acks each message and gives its credit back, as a client
    does, until nothing more comes."""
    recorder = Reading()
    consumer = session.consumer(
        consumer_id,
        S,
        recorder,
        prefetch=prefetch,
        offset=offset,
        selector=selector,
        ack_mode=AckMode.CLIENT,
    )
    pump(session, consumer, recorder)
    return consumer, recorder


def pump(session: BrokerSession, consumer: BrokerConsumer, recorder: Recorder) -> list[Entry]:
    """Ack what arrived and give the credit back until nothing more comes; all it got."""
    got: list[Entry] = []
    taken = recorder.take()
    while taken:
        got += taken
        for entry in taken:
            session.ack(consumer, entry.seq, cumulative=False)
        BrokerSession.add_credit(consumer, len(taken))
        taken = recorder.take()
    if isinstance(recorder, Reading):
        recorder.got += got
    return got


# -- appending and reading ranges ---------------------------------------------------------


def test_offsets_number_messages_from_one_and_read_returns_ranges(broker: Broker) -> None:
    append(broker, 10)
    s = stream_of(broker)
    assert (s.first, s.head, s.last, s.count) == (1, 11, 10, 10)
    assert s.bytes == sum(e.message.size for e in s.read(1, 11)[1])
    nxt, entries = s.read(3, 7)
    assert nxt == 7
    assert [e.seq for e in entries] == [3, 4, 5, 6]
    assert bodies(entries) == names(4, start=2)
    assert s.read(1, 1) == (1, [])


def test_a_read_past_the_head_stops_at_the_head(broker: Broker) -> None:
    append(broker, 5)
    s = stream_of(broker)
    nxt, entries = s.read(4, 1000)
    assert (nxt, [e.seq for e in entries]) == (6, [4, 5])
    assert s.read(50, 100) == (6, [])  # nothing there yet: the caller waits at the head


def test_a_read_before_first_starts_at_first(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=3)
    append(broker, 8)
    nxt, entries = stream_of(broker).read(0, 100)
    assert ([e.seq for e in entries], nxt) == ([6, 7, 8], 9)


def test_a_read_is_paged_by_messages(broker: Broker) -> None:
    append(broker, 10)
    s = stream_of(broker)
    nxt, entries = s.read(1, 11, max_messages=4)
    assert (nxt, [e.seq for e in entries]) == (5, [1, 2, 3, 4])
    nxt, entries = s.read(nxt, 11, max_messages=4)
    assert (nxt, [e.seq for e in entries]) == (9, [5, 6, 7, 8])
    nxt, entries = s.read(nxt, 11, max_messages=4)
    assert (nxt, [e.seq for e in entries]) == (11, [9, 10])
    # a page that ends exactly at the end of the range says the range is done
    assert s.read(7, 11, max_messages=4)[0] == 11


def test_a_read_is_paged_by_bytes_and_takes_at_least_one(broker: Broker) -> None:
    append(broker, 6)
    s = stream_of(broker)
    size = s.read(1, 2)[1][0].message.size
    nxt, entries = s.read(1, 7, max_bytes=2 * size)
    assert (nxt, [e.seq for e in entries]) == (3, [1, 2])
    nxt, entries = s.read(1, 7, max_bytes=1)
    assert (nxt, [e.seq for e in entries]) == (2, [1])


def test_every_message_is_stored_persistent_whatever_the_producer_said(broker: Broker) -> None:
    append(broker, 3, persistent=False)
    assert stored(broker, S) == names(3)
    assert all(e.message.persistent for e in stream_of(broker).read(1, 4)[1])


# -- offsets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, Offset("next")),
        ("first", Offset("first")),
        (" LAST ", Offset("last")),
        ("next", Offset("next")),
        ("42", Offset("offset", 42)),
        ("offset=7", Offset("offset", 7)),
        (0, Offset("offset", 0)),
        (12, Offset("offset", 12)),
        ("timestamp=1700000000123", Offset("timestamp", 1_700_000_000_123)),
        ("timestamp=1700000000", Offset("timestamp", 1_700_000_000_000)),  # seconds
    ],
)
def test_parse_offset_forms(text: str | int | None, expected: Offset) -> None:
    assert parse_offset(text) == expected


@pytest.mark.parametrize(
    "text", ["", "latest", "-1", "offset=", "offset=-3", "timestamp=abc", "1.5", "x=3", -1, 1 << 63]
)
def test_parse_offset_refuses_anything_else_and_says_the_forms(text: str | int) -> None:
    with pytest.raises(ConsumerError, match="stream"):
        parse_offset(text)


def test_an_offset_prints_as_it_is_written() -> None:
    assert [str(parse_offset(t)) for t in ("first", "5", "timestamp=1700000000000")] == [
        "first",
        "offset=5",
        "timestamp=1700000000000",
    ]


def test_locate_first_last_next_and_numbers_clamped(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=5)
    append(broker, 12)
    s = stream_of(broker)
    assert (s.first, s.head) == (8, 13)
    assert s.locate(Offset("first")) == 8
    assert s.locate(Offset("last")) == 12
    assert s.locate(Offset("next")) == 13
    assert s.locate(Offset("offset", 10)) == 10
    assert s.locate(Offset("offset", 2)) == 8  # below first: first
    assert s.locate(Offset("offset", 999)) == 13  # above the head: the head


def test_locate_on_an_empty_stream_is_its_head(broker: Broker) -> None:
    s = broker.destination(S)
    assert isinstance(s, Stream)
    assert [s.locate(parse_offset(t)) for t in ("first", "last", "next", "5")] == [1, 1, 1, 1]


def test_timestamp_offsets_find_the_first_message_at_or_after(
    broker: Broker, clock: FakeClock
) -> None:
    times = []
    for i in range(6):
        times.append(clock.now)
        append(broker, 1, start=i)
        clock.advance(1000)
    s = stream_of(broker)
    assert s.locate(Offset("timestamp", times[0] - 5)) == 1
    assert s.locate(Offset("timestamp", times[3])) == 4
    assert s.locate(Offset("timestamp", times[3] + 1)) == 5
    assert s.locate(Offset("timestamp", clock.now + 10_000)) == s.head
    assert s.locate(parse_offset(f"timestamp={times[2] // 1000}")) <= 3  # seconds, rounded down


# -- readers ------------------------------------------------------------------------------


def test_two_readers_each_get_every_message_and_nothing_is_consumed(broker: Broker) -> None:
    append(broker, 30)
    one = BrokerConnection(broker).session(AckMode.CLIENT)
    two = BrokerConnection(broker).session(AckMode.CLIENT)
    _, first = read_all(one)
    _, second = read_all(two)
    assert first.got_bodies == names(30)
    assert second.got_bodies == names(30)
    assert first.seqs == list(range(1, 31))
    assert stream_of(broker).count == 30
    assert stored(broker, S) == names(30)  # a reader's ack removes nothing


def test_a_reader_at_next_gets_only_what_comes_after(broker: Broker) -> None:
    append(broker, 5)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session, offset=None)
    assert recorder.got == []
    append(broker, 3, start=5)
    assert bodies(pump(session, consumer, recorder)) == names(3, start=5)


def test_a_reader_at_last_gets_the_newest_then_what_follows(broker: Broker) -> None:
    append(broker, 5)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session, offset="last")
    assert recorder.got_bodies == [b"m4"]
    append(broker, 2, start=5)
    assert bodies(pump(session, consumer, recorder)) == [b"m5", b"m6"]


def test_a_reader_at_an_offset_starts_there(broker: Broker) -> None:
    append(broker, 10)
    _, recorder = read_all(BrokerConnection(broker).session(AckMode.CLIENT), offset=7)
    assert recorder.seqs == [7, 8, 9, 10]


def test_a_reader_follows_appends_as_they_come(broker: Broker) -> None:
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session)
    for i in range(5):
        append(broker, 1, start=i)
        assert bodies(pump(session, consumer, recorder)) == [f"m{i}".encode()]


def test_an_auto_ack_reader_reads_everything_with_its_credit(broker: Broker) -> None:
    append(broker, 700)
    session = BrokerConnection(broker).session(AckMode.AUTO)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=50, offset="first")
    got: list[Entry] = []
    while taken := recorder.take():
        got += taken
        BrokerSession.add_credit(consumer, len(taken))
    assert [e.seq for e in got] == list(range(1, 701))


def test_a_client_ack_reader_acks_cumulatively(broker: Broker) -> None:
    append(broker, 20)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=10, offset="first")
    got = recorder.take()
    assert len(got) == 10
    assert session.ack(consumer, got[-1].seq) == 10  # client mode: cumulative
    assert not consumer.inflight
    BrokerSession.add_credit(consumer, 10)
    assert [e.seq for e in recorder.take()] == list(range(11, 21))


def test_a_reader_closed_unacked_loses_nothing_for_a_new_reader(broker: Broker) -> None:
    append(broker, 3)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=10, offset="first")
    assert len(recorder.take()) == 3
    session.close_consumer(consumer)
    _, again = read_all(session, 2)  # a reader of its own: from first again
    assert again.got_bodies == names(3)


def test_nacked_messages_come_again_in_offset_order_whatever_their_priority(
    broker: Broker,
) -> None:
    session = BrokerConnection(broker).session()
    for i in range(6):
        session.send(S, msg(f"m{i}", priority=(1, 9, 4)[i % 3]))
    reader = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = reader.consumer(1, S, recorder, prefetch=3, offset="first")
    assert [e.seq for e in recorder.take()] == [1, 2, 3]
    reader.nack(consumer, 3, cumulative=True)
    BrokerSession.add_credit(consumer, 6)
    got = recorder.take()
    assert [(e.seq, e.redelivered) for e in got] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
        (5, False),
        (6, False),
    ]


def test_a_rejected_message_is_dead_lettered_and_stays_in_the_stream(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    append(broker, 2)
    reader = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = reader.consumer(1, S, recorder, prefetch=5, offset="first")
    [one, _] = recorder.take()
    reader.nack(consumer, one.seq, requeue=False)
    [dead] = looking.browse(broker, "queue:__sys__deadLetter")
    assert dead.message.body == b"m0"
    assert dead.message.properties["chute_original_destination"] == S
    assert stream_of(broker).count == 2
    logged = [r.getMessage() for r in caplog.records if "moved to" in r.getMessage()]
    assert logged
    assert all(f"from {S} moved to" in line for line in logged)  # the stream, not a key


def test_closing_the_connection_closes_its_readers(broker: Broker) -> None:
    append(broker, 20)
    start = broker.memory.used
    conn = BrokerConnection(broker)
    conn.session(AckMode.CLIENT).consumer(1, S, Recorder(), prefetch=5, offset="first")
    conn.session(AckMode.AUTO).consumer(1, S, Recorder(), prefetch=5, offset="first")
    assert len(stream_of(broker).readers) == 2
    conn.close()
    assert stream_of(broker).readers == []
    assert broker.memory.used == start


def test_a_reader_with_a_selector_gets_only_matching_messages(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    for i in range(40):
        session.send(S, msg(f"m{i}", properties={"n": i}))
    reader = BrokerConnection(broker).session(AckMode.CLIENT)
    _, recorder = read_all(reader, selector="n >= 30 OR n = 3")
    assert recorder.seqs == [4, *range(31, 41)]


def test_a_sparse_selector_finds_its_match_far_down_a_long_stream(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    n = 16 * WINDOW * 3
    for i in range(n):
        session.send(S, msg(f"m{i}", properties={"n": i}))
    reader = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(reader, selector=f"n = {n - 1}")
    for _ in range(5):  # each sweep nudges a selective reader on by a bounded step
        broker.expire_due()
    assert [e.seq for e in pump(reader, consumer, recorder)] == [n]


def test_a_reader_that_falls_behind_retention_jumps_to_first(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=5)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=1, offset="first")
    append(broker, 1)
    [first] = recorder.take()  # it holds the window's worth and reads no more until credit
    reader = consumer.queue
    assert isinstance(reader, StreamReader)
    append(broker, 3 * WINDOW, start=1)
    assert stream_of(broker).first == 3 * WINDOW + 1 - 4
    session.ack(consumer, first.seq)
    BrokerSession.add_credit(consumer, 1)
    got = [first, *pump(session, consumer, recorder)]
    seqs = [e.seq for e in got]
    assert seqs == sorted(seqs)
    assert seqs[-5:] == list(range(3 * WINDOW - 3, 3 * WINDOW + 2))
    assert len(seqs) <= WINDOW + 6  # what it held already, then the retained five


def test_a_reader_never_holds_more_than_its_window(broker: Broker) -> None:
    append(broker, 5 * WINDOW)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=10, offset="first")
    reader = consumer.queue
    assert isinstance(reader, StreamReader)
    assert reader.window == WINDOW
    for _ in range(30):
        taken = recorder.take()
        assert reader.held <= reader.window
        for entry in taken:
            session.ack(consumer, entry.seq, cumulative=False)
        BrokerSession.add_credit(consumer, len(taken))
    big = session.consumer(2, S, Recorder(), prefetch=2 * WINDOW, offset="first")
    assert isinstance(big.queue, StreamReader)
    assert big.queue.window == 2 * WINDOW  # a prefetch above the window widens it
    assert big.queue.held <= 2 * WINDOW


def test_an_offset_on_a_queue_is_refused(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    with pytest.raises(ConsumerError, match="streams only"):
        session.consumer(1, "queue:q", Recorder(), offset="first")
    with pytest.raises(ConsumerError, match="stream offset"):
        session.consumer(1, S, Recorder(), offset="yesterday")


# -- retention ----------------------------------------------------------------------------


def test_max_messages_keeps_the_newest(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=10)
    append(broker, 25)
    s = stream_of(broker)
    assert (s.count, s.first, s.head, s.removed) == (10, 16, 26, 15)
    assert stored(broker, S) == names(10, start=15)
    assert bodies(s.read(0, 100)[1]) == names(10, start=15)


def test_max_bytes_keeps_what_fits(clock: FakeClock) -> None:
    size = msg("m10").size
    broker = with_settings(clock, max_bytes=4 * size)
    append(broker, 20, start=10)
    s = stream_of(broker)
    assert s.count == 4
    assert s.bytes <= 4 * size
    assert bodies(s.read(0, 100)[1]) == names(4, start=26)


def test_max_age_removes_old_messages_in_the_sweep(clock: FakeClock) -> None:
    broker = with_settings(clock, max_age_ms=60_000)
    append(broker, 5)
    clock.advance(30_000)
    append(broker, 5, start=5)
    s = stream_of(broker)
    broker.expire_due()
    assert s.count == 10  # none is old enough yet
    clock.advance(30_001)
    broker.expire_due()
    assert (s.count, s.first) == (5, 6)
    assert stored(broker, S) == names(5, start=5)
    clock.advance(30_000)
    broker.expire_due()
    assert (s.count, s.first, s.head) == (0, 11, 11)
    append(broker, 1, start=10)  # numbering goes on
    assert (s.first, s.last) == (11, 11)


def test_max_age_is_not_applied_on_append(clock: FakeClock) -> None:
    broker = with_settings(clock, max_age_ms=1000)
    append(broker, 3)
    clock.advance(5000)
    append(broker, 1, start=3)
    assert stream_of(broker).count == 4
    broker.expire_due()
    assert stream_of(broker).count == 1


# -- the tail and the store ---------------------------------------------------------------


@pytest.fixture
def small_tail(monkeypatch: pytest.MonkeyPatch) -> int:
    tail = 2000
    monkeypatch.setattr(stream_module, "TAIL_BYTES", tail)
    return tail


def test_a_stream_longer_than_its_tail_reads_back_from_the_store(
    broker: Broker, small_tail: int
) -> None:
    start = broker.memory.used
    append(broker, 400)
    s = stream_of(broker)
    assert broker.memory.used - start <= small_tail
    assert bodies(s.read(1, 401)[1]) == names(400)
    assert [e.seq for e in s.read(150, 160)[1]] == list(range(150, 160))
    nxt, page = s.read(1, 401, max_messages=300)
    assert (nxt, len(page)) == (301, 300)
    assert s.last == 400
    _, recorder = read_all(BrokerConnection(broker).session(AckMode.CLIENT), prefetch=7)
    assert recorder.got_bodies == names(400)


def test_timestamps_below_the_tail_are_found_in_the_store(
    broker: Broker, clock: FakeClock, small_tail: int
) -> None:
    stamps = []
    for i in range(300):
        stamps.append(clock.now)
        append(broker, 1, start=i)
        clock.advance(10)
    s = stream_of(broker)
    for n in (0, 1, 57, 150, 299):
        assert s.locate(Offset("timestamp", stamps[n])) == n + 1
        assert s.locate(Offset("timestamp", stamps[n] - 5)) == n + 1


def test_a_transaction_longer_than_the_tail_is_read_whole(broker: Broker, small_tail: int) -> None:
    start = broker.memory.used
    append(broker, 5)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session, prefetch=400)
    tx = BrokerConnection(broker).session(transacted=True)
    for i in range(5, 305):
        tx.send(S, msg(f"m{i}"))
    tx.commit()
    pump(session, consumer, recorder)
    assert recorder.seqs == list(range(1, 306))
    assert bodies(stream_of(broker).read(1, 400)[1]) == names(305)
    append(broker, 1, start=305)  # the tail is back within its bytes
    pump(session, consumer, recorder)
    assert broker.memory.used - start <= small_tail  # the reader acked all it got


def test_retention_inside_a_transaction_longer_than_the_tail(
    clock: FakeClock, small_tail: int
) -> None:
    broker = with_settings(clock, max_messages=10)
    tx = BrokerConnection(broker).session(transacted=True)
    for i in range(100):
        tx.send(S, msg(f"m{i}"))
    tx.commit()
    s = stream_of(broker)
    assert (s.count, s.first, s.head) == (10, 91, 101)
    assert stored(broker, S) == names(10, start=90)
    assert bodies(s.read(0, 1000)[1]) == names(10, start=90)
    assert stream_of(restart(broker)).first == 91


def test_retention_past_the_tail_removes_from_the_store(clock: FakeClock, small_tail: int) -> None:
    broker = with_settings(clock, max_messages=150)
    append(broker, 500)
    s = stream_of(broker)
    assert (s.count, s.first) == (150, 351)
    assert stored(broker, S) == names(150, start=350)
    assert bodies(s.read(0, 1000)[1]) == names(150, start=350)


def test_age_retention_past_the_tail(clock: FakeClock, small_tail: int) -> None:
    broker = with_settings(clock, max_age_ms=1000)
    append(broker, 300)
    clock.advance(500)
    append(broker, 300, start=300)
    clock.advance(600)
    broker.expire_due()
    s = stream_of(broker)
    assert (s.count, s.first) == (300, 301)
    assert bodies(s.read(0, 1000)[1]) == names(300, start=300)


# -- prepared transactions ----------------------------------------------------------------


def prepare_send(broker: Broker, xid: str, body: str) -> int:
    """Prepare a transaction that sends ``body`` to the stream; the offset it holds."""
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send(S, msg(body))
    tx.prepare(xid)
    [held] = stream_of(broker).reserved
    return held


def test_a_prepared_send_holds_the_head_until_its_commit(broker: Broker) -> None:
    append(broker, 2)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session)
    assert recorder.seqs == [1, 2]
    assert prepare_send(broker, "xid-1", "prepared") == 3
    append(broker, 2, start=3)  # offsets 4 and 5, behind the prepared one
    s = stream_of(broker)
    assert (s.head, s.last, s.count) == (3, 2, 4)
    assert pump(session, consumer, recorder) == []  # the reader waits at offset 3
    assert s.read(1, 100) == (3, s.read(1, 3)[1])
    broker.xa.commit("xid-1")
    assert (s.head, s.last, s.count) == (6, 5, 5)
    assert bodies(pump(session, consumer, recorder)) == [b"prepared", b"m3", b"m4"]
    assert [e.seq for e in recorder.got] == [1, 2, 3, 4, 5]
    assert stored(broker, S) == [b"m0", b"m1", b"prepared", b"m3", b"m4"]


def test_a_prepared_commit_larger_than_retention_steps_keeps_only_the_newest(
    clock: FakeClock,
) -> None:
    """A commit places a transaction's sends together: retention still applies in full,
    though the transaction passes the limit by more than one retention step."""
    limit = 100
    n = 3 * stream_module.RETAIN_STEP + 7
    broker = with_settings(clock, max_messages=limit)
    append(broker, 5)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session, offset="next")
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    for i in range(n):
        tx.send(S, msg(f"t{i}"))
    tx.prepare("big")
    broker.xa.commit("big")
    s = stream_of(broker)
    assert (s.count, s.head, s.appended) == (limit, 5 + n + 1, 5 + n)
    assert s.removed == 5 + n - limit
    expected = [f"t{i}".encode() for i in range(n - limit, n)]
    assert bodies(s.read(0, s.head)[1]) == expected
    assert stored(broker, S) == expected
    got = pump(session, consumer, recorder)  # the reader, at the head before, moved on
    assert bodies(got) == expected


def test_a_rolled_back_prepared_send_releases_its_offset(broker: Broker) -> None:
    append(broker, 1)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session)
    prepare_send(broker, "xid-1", "never")
    append(broker, 2, start=1)
    assert pump(session, consumer, recorder) == []
    broker.xa.rollback("xid-1")
    s = stream_of(broker)
    assert (s.head, s.last, s.count, s.reserved) == (5, 4, 3, set())
    assert recorder.seqs == [1]
    assert [e.seq for e in pump(session, consumer, recorder)] == [3, 4]
    assert bodies(s.read(1, 5)[1]) == [b"m0", b"m1", b"m2"]
    assert stored(broker, S) == [b"m0", b"m1", b"m2"]


def test_a_prepared_send_commits_after_a_restart(broker: Broker) -> None:
    append(broker, 1)
    prepare_send(broker, "xid-1", "prepared")
    append(broker, 2, start=2)
    after = restart(broker)
    s = stream_of(after)
    assert (s.head, s.count) == (2, 3)
    after.xa.commit("xid-1")
    assert (s.head, s.count, s.first, s.last) == (5, 4, 1, 4)
    assert bodies(s.read(1, 5)[1]) == [b"m0", b"prepared", b"m2", b"m3"]
    _, recorder = read_all(BrokerConnection(after).session(AckMode.CLIENT))
    assert recorder.got_bodies == [b"m0", b"prepared", b"m2", b"m3"]


def test_a_prepared_send_older_than_the_tail_commits_readable(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "TAIL_BYTES", 3000)
    prepare_send(broker, "xid-1", "p")  # offset 1, small: it fits in the tail's slack
    session = BrokerConnection(broker).session()
    session.send(S, msg(b"m" * 200))  # offset 2: only in the store once 3 comes
    session.send(S, msg(b"b" * 800))
    broker.xa.commit("xid-1")
    s = stream_of(broker)
    assert [e.seq for e in s.read(1, s.head)[1]] == [1, 2, 3]
    assert [e.seq for e in s.read(2, s.head)[1]] == [2, 3]
    _, recorder = read_all(BrokerConnection(broker).session(AckMode.CLIENT))
    assert recorder.seqs == [1, 2, 3]


def test_a_stream_with_a_prepared_send_is_not_deleted(broker: Broker) -> None:
    prepare_send(broker, "xid-1", "p")
    with pytest.raises(TransactionError, match="prepared"):
        broker.destinations.delete(S)


def test_retention_goes_on_behind_a_prepared_send(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=3)
    prepare_send(broker, "xid-1", "p")
    append(broker, 10, start=1)
    s = stream_of(broker)
    assert s.count <= 4  # what retention may not remove yet is the prepared one's
    broker.xa.commit("xid-1")
    assert s.count == 3
    assert bodies(s.read(0, 100)[1]) == names(3, start=8)


# -- purge, delete, stats, browse, memory --------------------------------------------------


def test_purge_removes_everything_and_offsets_go_on(broker: Broker) -> None:
    append(broker, 10)
    s = stream_of(broker)
    assert broker.destinations.purge(S) == 10
    assert (s.count, s.bytes, s.first, s.head) == (0, 0, 11, 11)
    assert stored(broker, S) == []
    assert s.read(0, 100) == (11, [])
    append(broker, 1, start=10)
    assert [e.seq for e in s.read(0, 100)[1]] == [11]
    assert s.removed == 10


def test_purge_past_the_tail(broker: Broker, small_tail: int) -> None:
    append(broker, 300)
    start = broker.memory.used
    assert broker.destinations.purge(S) == 300
    assert stored(broker, S) == []
    assert broker.memory.used < start


def test_purge_with_a_prepared_send_pending_removes_what_was_kept(broker: Broker) -> None:
    append(broker, 2)
    prepare_send(broker, "xid-1", "p")
    append(broker, 2, start=3)
    s = stream_of(broker)
    assert broker.destinations.purge(S) == 4
    assert stored(broker, S) == []
    assert (s.count, s.bytes) == (0, 0)
    broker.xa.commit("xid-1")
    assert (s.count, bodies(s.read(0, 100)[1])) == (1, [b"p"])
    assert stored(broker, S) == [b"p"]


def test_delete_closes_its_readers_and_gives_back_their_memory(broker: Broker) -> None:
    start = broker.memory.used
    append(broker, 50)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    closer = Closer(session)
    consumer = session.consumer(1, S, closer, prefetch=5, offset="first")
    assert len(closer.take()) == 5
    assert broker.destinations.delete(S, by="admin") == 50
    assert [type(e) for e in closer.errors] == [DestinationDeleted]
    assert "stream:s was deleted by admin" in str(closer.errors[0])
    assert consumer.closed
    assert session.consumers == {}
    assert broker.find(S) is None
    assert S not in memory(broker).definitions
    assert broker.memory.used == start


def test_a_deleted_stream_made_again_keeps_numbering(broker: Broker) -> None:
    append(broker, 3)
    broker.destinations.delete(S)
    append(broker, 1)
    s = stream_of(broker)
    assert (s.first, s.count) == (4, 1)


def test_an_emptied_stream_starts_at_its_head(broker: Broker) -> None:
    append(broker, 3)
    broker.destinations.delete(S)
    s = broker.destination(S)
    assert isinstance(s, Stream)
    assert (s.count, s.first, s.head) == (0, 4, 4)  # made again: numbering goes on
    prepare_send(broker, "xid-1", "p")
    broker.destinations.purge(S)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read_all(session)  # from first: waits for the prepared one
    assert (s.first, s.head) == (4, 4)
    broker.xa.commit("xid-1")
    assert [e.seq for e in pump(session, consumer, recorder)] == [4]


def test_memory_comes_back_when_readers_close(broker: Broker) -> None:
    start = broker.memory.used
    append(broker, 20)
    with_tail = broker.memory.used
    assert with_tail > start
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    readers = [session.consumer(i, S, Recorder(), prefetch=5, offset="first") for i in (1, 2)]
    auto = BrokerConnection(broker).session(AckMode.AUTO)
    readers.append(auto.consumer(3, S, Recorder(), prefetch=3, offset="first"))
    assert broker.memory.used > with_tail
    for consumer in readers[:2]:
        session.close_consumer(consumer)
    auto.close_consumer(readers[2])
    assert broker.memory.used == with_tail
    assert stream_of(broker).readers == []


def test_stats_of_a_stream(clock: FakeClock) -> None:
    broker = with_settings(clock, max_messages=5)
    append(broker, 8)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    session.consumer(1, S, recorder, prefetch=2, offset="first")
    got = stream_stats(stream_of(broker))
    assert got == stats_of(broker, S) | {"readers": got["readers"]}
    assert got["kind"] == "stream"
    assert (got["depth"], got["first"], got["head"], got["removed"]) == (5, 4, 9, 3)
    assert got["enqueued"] == 8
    assert got["bytes"] == stream_of(broker).bytes
    assert (got["consumers"], got["inflight"], got["delivered"]) == (1, 2, 2)
    assert got["readers"] == [{"position": 9, "consumers": 1}]


def test_browsing_a_stream_walks_it_without_consuming(broker: Broker, small_tail: int) -> None:
    session = BrokerConnection(broker).session()
    for i in range(300):
        session.send(S, msg(f"m{i}", properties={"odd": i % 2 == 1}))
    assert bodies(looking.browse(broker, S)) == names(300)
    assert [e.seq for e in looking.browse(broker, S, selector="odd")][:3] == [2, 4, 6]
    assert len(looking.browse(broker, S, limit=10)) == 10
    page = looking.browse_page(broker, S, max_messages=100)
    assert (len(page.entries), page.done) == (100, False)
    assert stream_of(broker).count == 300


def test_many_streams_share_one_memory_budget_for_their_tails(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "TAILS_BYTES", 64 * 4096)
    monkeypatch.setattr(stream_module, "TAIL_MIN", 4096)
    start = broker.memory.used
    body = b"x" * 1000
    for n in range(16):  # 16 streams: each keeps its share, about 4 of its newest
        for _ in range(50):
            broker.send(f"stream:many.{n}", Message.create(body))
    broker.expire_due()  # the sweep: streams made early give up their share too
    per_stream = [broker.streams[f"stream:many.{n}"]._tail_bytes for n in range(16)]
    assert max(per_stream) <= 64 * 4096 // 16
    assert broker.memory.used - start <= 64 * 4096 + 16 * 2100
    first = broker.streams["stream:many.0"]
    assert [e.message.body for e in first.read(1, 51)[1]] == [body] * 50  # the rest: the store
