"""Paging: past the memory limit, durable queues keep new messages in the store only.

The same tests run over the in-memory store and the journal: the core pages
the same way whatever the store, and the journal must read back exactly what
the reference store would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.paging import held_cost
from chute.core.model.queue import PAGE_LOW, QueueChannel
from chute.core.model.store import Store
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.store.journal import Journal
from chute.store.memory import MemoryStore

from ..core.helpers import FakeClock

LIMIT = 128 << 10  # what the queues may hold in memory: ~120 of these messages
BODY = b"x" * 200
COST = held_cost(Message.create(BODY))  # what one costs the broker's memory

OpenStore = Callable[[], Store]


@pytest.fixture(params=["memory", "journal"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Opens the store; opening again is a restart on the same data."""
    opened: list[Store] = []
    memory = MemoryStore()

    def open_() -> Store:
        if request.param == "memory":
            return memory
        for store in opened:
            store.close()
        journal = Journal(tmp_path / "journal", sync="never", segment_size=256 << 10)
        opened.append(journal)
        return journal

    yield open_
    for store in opened:
        store.close()


def start(store: Store) -> Broker:
    broker = Broker(store, memory_limit=LIMIT)
    broker.recover()
    return broker


class Taker:
    """A receiver that remembers what it got."""

    def __init__(self) -> None:
        self.got: list[tuple[BrokerConsumer, int, Message, bool]] = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.got.append((consumer, entry.seq, entry.message, entry.redelivered))


def drain(session: BrokerSession, address: str, *, prefetch: int = 50) -> list[tuple[bytes, bool]]:
    """Consume everything, acking each message as it arrives (which pulls the next window)."""
    taker = Taker()
    consumer = session.consumer(1, address, taker, prefetch=prefetch)
    out: list[tuple[bytes, bool]] = []
    while taker.got:
        batch, taker.got = taker.got, []
        for c, seq, message, redelivered in batch:
            out.append((message.body, redelivered))
            session.ack(c, seq)
        BrokerSession.add_credit(consumer, len(batch))
    session.close_consumer(consumer)
    return out


def queue(broker: Broker, name: str) -> QueueChannel:
    found = broker.queue_by_name(name)
    assert found is not None
    return found


def send(
    session: BrokerSession, address: str, n: int, *, persistent: bool = True, start: int = 0
) -> None:
    for i in range(start, start + n):
        session.send(address, Message.create(BODY + str(i).encode(), persistent=persistent))


def expected(n: int, start: int = 0) -> list[bytes]:
    return [BODY + str(i).encode() for i in range(start, start + n)]


def test_a_deep_backlog_stays_within_the_limit_and_drains_in_order(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 2000)
    q = queue(broker, "queue:q")
    assert q.held == 2000
    assert q.paged >= q.held - LIMIT // COST
    assert broker.memory.used <= LIMIT
    got = drain(s, "queue:q")
    assert [body for body, _ in got] == expected(2000)
    assert not any(redelivered for _, redelivered in got)
    assert (q.held, q.paged, q.paged_bytes, broker.memory.used) == (0, 0, 0, 0)


def test_paging_ends_once_the_backlog_is_read_back(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 300)
    assert [b for b, _ in drain(s, "queue:q")] == expected(300)
    send(s, "queue:q", 10, start=300)
    assert queue(broker, "queue:q").paged == 0  # under the limit again: in memory
    assert [b for b, _ in drain(s, "queue:q")] == expected(10, start=300)


def test_non_persistent_messages_page_too_and_die_with_the_process(
    open_store: OpenStore,
) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 200, persistent=False)
    send(s, "queue:q", 200, start=200)
    assert queue(broker, "queue:q").paged >= 400 - LIMIT // COST
    restarted = start(open_store())  # non-persistent messages do not survive a restart
    s2 = BrokerConnection(restarted).session(AckMode.CLIENT)
    assert [b for b, _ in drain(s2, "queue:q")] == expected(200, start=200)


def test_non_persistent_paged_messages_are_read_back_and_acked(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 300, persistent=False)
    assert [b for b, _ in drain(s, "queue:q")] == expected(300)
    assert queue(broker, "queue:q").held == 0
    assert broker.store.page_in("queue:q", 0, 1000) == []  # their acks reached the store


def test_a_restart_with_a_paged_backlog_recovers_everything_in_order(
    open_store: OpenStore,
) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 1500)
    restarted = start(open_store())
    q = queue(restarted, "queue:q")
    assert q.held == 1500
    assert restarted.memory.used <= LIMIT + COST * 2
    s2 = BrokerConnection(restarted).session(AckMode.CLIENT)
    assert [b for b, _ in drain(s2, "queue:q")] == expected(1500)


def test_unacked_messages_come_back_before_the_paged_ones(open_store: OpenStore) -> None:
    broker = start(open_store())
    conn = BrokerConnection(broker)
    s = conn.session(AckMode.CLIENT)
    send(s, "queue:q", 500)
    taker = Taker()
    consumer = s.consumer(1, "queue:q", taker, prefetch=10)
    first = [m.body for _, _, m, _ in taker.got]
    assert first == expected(10)
    s.close()  # nothing acked: the ten go back, redelivered
    s2 = BrokerConnection(broker).session(AckMode.CLIENT)
    got = drain(s2, "queue:q")
    assert [b for b, _ in got] == expected(500)
    assert [r for _, r in got[:10]] == [True] * 10
    assert not any(r for _, r in got[10:])
    assert consumer.closed


def test_durable_subscriptions_page_each_on_their_own(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker, client_id="c").session(AckMode.CLIENT)
    for name in ("a", "b"):  # subscribe, then go away: the subscriptions keep what comes
        s.close_consumer(s.consumer(1, "topic:t", Taker(), subscription=name, durable=True))
    send(s, "topic:t", 600)
    assert broker.memory.used <= LIMIT + PAGE_LOW * COST  # < PAGE_LOW: no paging
    for name in ("a", "b"):
        taker = Taker()
        consumer = s.consumer(1, "topic:t", taker, prefetch=50, subscription=name, durable=True)
        got: list[bytes] = []
        while taker.got:
            batch, taker.got = taker.got, []
            for c, seq, message, _ in batch:
                got.append(message.body)
                s.ack(c, seq)
            BrokerSession.add_credit(consumer, len(batch))
        assert got == expected(600)
        s.close_consumer(consumer)


def test_browsing_shows_paged_messages_without_consuming(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    send(s, "queue:q", 400)
    assert [e.message.body for e in looking.browse(broker, "queue:q")] == expected(400)
    assert [e.message.body for e in looking.browse(broker, "queue:q", limit=5)] == expected(5)
    assert queue(broker, "queue:q").held == 400
    assert [b for b, _ in drain(s, "queue:q")] == expected(400)


def test_a_transaction_committed_while_paging_loses_nothing(open_store: OpenStore) -> None:
    broker = start(open_store())
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    send(s, "queue:q", 300)
    send(tx, "queue:q", 50, start=300)
    send(s, "queue:q", 100, start=350)
    tx.commit()
    got = sorted(b for b, _ in drain(s, "queue:q"))
    assert got == sorted(expected(450))


def test_a_transacted_producer_pages_too(open_store: OpenStore) -> None:
    broker = start(open_store())
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    for start_at in range(0, 2000, 100):
        send(tx, "queue:q", 100, start=start_at)
        tx.commit()
    assert queue(broker, "queue:q").paged >= 2000 - LIMIT // COST
    assert broker.memory.used <= LIMIT
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    assert [b for b, _ in drain(s, "queue:q")] == expected(2000)


def test_a_consumer_waiting_on_a_paging_queue_gets_what_a_transaction_commits(
    open_store: OpenStore,
) -> None:
    broker = start(open_store())
    plain = BrokerConnection(broker).session(AckMode.CLIENT)
    send(plain, "queue:other", 100)  # fills the memory budget: new messages page
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    taker = Taker()
    s.consumer(1, "queue:q", taker, prefetch=1000)
    send(tx, "queue:q", 300)
    tx.commit()  # paged inside the commit, read back once its records are written
    assert [m.body for _, _, m, _ in taker.got] == expected(300)


def test_paged_messages_are_found_after_compaction_moved_them(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", sync="never", segment_size=64 << 10, compact_ratio=0.5)
    try:
        broker = start(journal)
        s = BrokerConnection(broker).session(AckMode.CLIENT)
        for i in range(3000):  # two queues interleaved: draining one leaves sparse segments
            s.send("queue:keep", Message.create(BODY + str(i).encode()))
            s.send("queue:drop", Message.create(BODY + str(i).encode()))
        assert queue(broker, "queue:keep").paged > 2500
        assert len(drain(s, "queue:drop")) == 3000
        journal.flush()  # the acks are written and counted before the pass looks
        journal.reclaim()  # (the writer may have compacted already, after a roll-over)
        assert journal.records_moved > 0  # live paged adds were copied forward
        assert [b for b, _ in drain(s, "queue:keep")] == expected(3000)
    finally:
        journal.close()


def test_one_huge_transaction_pages_and_drains_in_order(open_store: OpenStore) -> None:
    broker = start(open_store())
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    send(tx, "queue:q", 20_000)
    tx.commit()  # one record holding every add
    q = queue(broker, "queue:q")
    assert q.paged >= 20_000 - LIMIT // COST
    assert (q.held, q.inflight) == (20_000, 0)  # paged messages are not in flight
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    assert [b for b, _ in drain(s, "queue:q", prefetch=500)] == expected(20_000)


def test_a_journal_reopens_a_deep_backlog_without_decoding_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", sync="never")
    broker = Broker(journal)  # no memory limit: everything in memory while it runs
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    big = b"y" * 1000
    for i in range(5000):
        s.send("queue:q", Message.create(big + str(i).encode()))
        if i % 1000 == 999:
            journal.flush()  # as a server's producers wait for their syncs
    journal.close()
    journal = Journal(tmp_path / "j", sync="never")
    try:
        recovered = journal.recover()
        window = recovered.messages["queue:q"]
        count, size = recovered.paged["queue:q"]
        assert len(window) < 1200  # about 1 MiB decoded, not 5 MB
        assert len(window) + count == 5000
        assert 0.8 < size / (count * 1000) < 1.5  # an estimate, from the records' sizes
        restarted = Broker(journal, memory_limit=LIMIT)
        restarted.recover()
        q = queue(restarted, "queue:q")
        assert q.held == 5000
        assert q.paged >= count  # the window itself pages past the memory limit
        s2 = BrokerConnection(restarted).session(AckMode.CLIENT)
        got = [b for b, _ in drain(s2, "queue:q")]
        assert got == [big + str(i).encode() for i in range(5000)]
        assert (q.held, q.held_bytes, q.paged, q.paged_bytes) == (0, 0, 0, 0)
    finally:
        journal.close()


def test_restored_paged_messages_still_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    journal = Journal(tmp_path / "j", sync="never")
    broker = Broker(journal, clock=clock)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    for i in range(3000):
        s.send("queue:q", Message.create(BODY * 5 + str(i).encode()), ttl=60_000)
    journal.close()
    journal = Journal(tmp_path / "j", sync="never")
    try:
        restarted = Broker(journal, memory_limit=LIMIT, clock=clock)
        restarted.recover()
        q = queue(restarted, "queue:q")
        assert q.paged > 2000
        clock.advance(61_000)
        expired = 0
        while q.held:  # each sweep expires what is in memory; deliver() reads the next window
            swept = restarted.expire_due()
            assert swept, "nothing expired although messages are held"
            expired += swept
            q.deliver()
        assert expired == 3000
        assert q.expiring == 0
    finally:
        journal.close()


def test_a_window_spanning_plain_adds_and_a_large_transaction_reads_every_message(
    tmp_path: Path,
) -> None:
    """The read-ahead of a window covers the plain adds and only the start of the big
    transaction record after them: that record is read whole on its own."""
    journal = Journal(tmp_path / "j", sync="never")
    broker = Broker(journal)
    plain = BrokerConnection(broker).session(AckMode.CLIENT)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    big = b"z" * 1000
    bodies = [big + str(i).encode() for i in range(300)]
    for body in bodies[:10]:
        plain.send("queue:q", Message.create(body))
    for body in bodies[10:]:
        tx.send("queue:q", Message.create(body))
    tx.commit()  # one record of ~300 KB, past the pager's 64 KiB read-ahead
    journal.close()
    journal = Journal(tmp_path / "j", sync="never")
    try:
        window = journal.recover().messages["queue:q"]
        assert [s.message.body for s in window] == bodies
        assert journal.page_in("queue:q", 5, 20) == window[5:25]
    finally:
        journal.close()


def test_a_window_spanning_more_transactions_than_the_layout_cache_reads_them_all(
    tmp_path: Path,
) -> None:
    """A restart reads back a window of 40 small transactions: more records than the pager
    remembers layouts of (16). None of their messages may go missing from the window."""
    journal = Journal(tmp_path / "j", sync="never")
    broker = Broker(journal)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    bodies = [f"{batch}-{i}".encode() for batch in range(40) for i in range(5)]
    for n, body in enumerate(bodies, 1):
        tx.send("queue:q", Message.create(body))
        if n % 5 == 0:
            tx.commit()
    journal.close()
    journal = Journal(tmp_path / "j", sync="never")
    try:
        recovered = journal.recover()
        assert [s.message.body for s in recovered.messages["queue:q"]] == bodies
        assert recovered.paged == {}
        assert [s.message.body for s in journal.page_in("queue:q", 0, 200)] == bodies
    finally:
        journal.close()


def test_purging_a_paged_backlog_removes_it_a_window_at_a_time(open_store: OpenStore) -> None:
    broker = start(open_store())
    conn = BrokerConnection(broker)
    s = conn.session(AckMode.CLIENT)
    send(s, "queue:q", 1000)
    send(s, "queue:q", 100, persistent=False, start=1000)
    q = queue(broker, "queue:q")
    assert q.paged
    assert conn.purge("queue:q") == 1100
    assert (q.held, q.paged, q.paged_bytes, broker.memory.used) == (0, 0, 0, 0)
    send(s, "queue:q", 3, start=2000)
    assert [b for b, _ in drain(s, "queue:q")] == expected(3, start=2000)
    broker.close()
    assert queue(start(open_store()), "queue:q").held == 0  # the purge's acks were stored


def test_deleting_a_paged_queue_forgets_it_in_the_store(open_store: OpenStore) -> None:
    broker = start(open_store())
    conn = BrokerConnection(broker)
    send(conn.session(), "queue:q", 1000)
    assert queue(broker, "queue:q").paged
    assert conn.delete("queue:q") == 1000
    assert broker.memory.used == 0
    broker.close()
    assert start(open_store()).queue_by_name("queue:q") is None


def test_reading_waits_while_the_writer_holds_its_index(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", sync="never")
    try:
        assert not journal.reading_waits()
        held, release = threading.Event(), threading.Event()

        def hold() -> None:  # as a reclaim pass holds it, on the writer's thread
            with journal._writer.index_lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        assert journal.reading_waits()
        release.set()
        holder.join(10)
        assert not journal.reading_waits()
        assert not MemoryStore().reading_waits()
    finally:
        journal.close()
