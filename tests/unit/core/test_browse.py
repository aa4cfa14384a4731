"""Browsing in pages (chute.core.operations.browse): a walk in sequence order, bounded per page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.store import Store
from chute.core.operations import looking
from chute.core.operations.browse import (
    PAGE_BYTES,
    PAGE_MESSAGES,
    STEP_MESSAGES,
    BrowsePage,
    finish,
)
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import InvalidAddress
from chute.message import Message
from chute.store.journal import Journal
from chute.store.memory import MemoryStore

from .helpers import Recorder, msg

BODY = b"x" * 200


def walk(broker: Broker, address: str, **bounds: Any) -> list[BrowsePage]:
    """Every page of one walk, asking with ``bounds`` each time."""
    pages = [looking.browse_page(broker, address, **bounds)]
    while not pages[-1].done:
        last = pages[-1]
        pages.append(
            looking.browse_page(broker, address, after=last.after, before=last.before, **bounds)
        )
    return pages


def seqs(pages: list[BrowsePage]) -> list[int]:
    return [e.seq for page in pages for e in page.entries]


def fill(broker: Broker, address: str, n: int, **fields: Any) -> None:
    s = BrokerConnection(broker).session()
    for i in range(n):
        s.send(address, msg(BODY + str(i).encode(), **fields))


def test_a_walk_covers_every_message_once_in_sequence_order(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for i in range(25):
        s.send("queue:q", msg(f"m{i}", priority=i % 10))  # priorities do not reorder a browse
    pages = walk(broker, "queue:q", max_messages=10)
    assert [len(p.entries) for p in pages] == [10, 10, 5]
    assert seqs(pages) == list(range(1, 26))
    assert [p.done for p in pages] == [False, False, True]
    assert broker.queues["queue:q"].held == 25  # nothing consumed


def test_a_page_is_bounded_by_bytes_and_always_covers_one_message(broker: Broker) -> None:
    fill(broker, "queue:q", 6)
    size = looking.browse(broker, "queue:q")[0].message.size
    assert [len(p.entries) for p in walk(broker, "queue:q", max_bytes=2 * size)] == [2, 2, 2]
    assert [len(p.entries) for p in walk(broker, "queue:q", max_bytes=1)] == [1] * 6


def test_the_broker_clamps_what_a_page_may_ask(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for _ in range(PAGE_MESSAGES + 5):
        s.send("queue:q", msg(b"x"))
    first = looking.browse_page(
        broker, "queue:q", max_messages=10 * PAGE_MESSAGES, max_bytes=1 << 30
    )
    assert len(first.entries) == PAGE_MESSAGES
    assert not first.done
    assert len(looking.browse_page(broker, "queue:q").entries) == PAGE_MESSAGES  # 0: the broker's
    fill(broker, "queue:big", 2000)  # 2000 x ~260 bytes: past PAGE_BYTES
    page = looking.browse_page(broker, "queue:big", max_bytes=1 << 30)
    assert sum(e.message.size for e in page.entries) <= PAGE_BYTES
    assert len(page.entries) < PAGE_MESSAGES


def test_an_empty_queue_is_one_empty_last_page(broker: Broker) -> None:
    broker.destination("queue:empty", create=True)
    [page] = walk(broker, "queue:empty")
    assert (page.entries, page.done) == ([], True)


def test_a_queue_nothing_made_holds_nothing_and_is_not_made(broker: Broker) -> None:
    [page] = walk(broker, "queue:never")
    assert (page.entries, page.done) == ([], True)
    assert broker.find("queue:never") is None
    with pytest.raises(InvalidAddress, match="topic"):
        looking.browse_page(broker, "topic:news")
    assert broker.find("topic:news") is None


def test_a_selector_filters_pages_and_the_walk_still_ends(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for i in range(30):
        s.send("queue:q", msg(f"m{i}", properties={"i": i}))
    pages = walk(broker, "queue:q", max_messages=7, selector="i >= 25 OR i = 3")
    assert [len(p.entries) for p in pages] == [1, 0, 0, 3, 2]
    assert [e.message.body for p in pages for e in p.entries] == [
        b"m3",
        b"m25",
        b"m26",
        b"m27",
        b"m28",
        b"m29",
    ]
    assert pages[-1].done


def test_messages_sent_after_the_walk_began_are_not_shown(broker: Broker) -> None:
    fill(broker, "queue:q", 10)
    first = looking.browse_page(broker, "queue:q", max_messages=4)
    fill(broker, "queue:q", 5)  # numbered at or past the walk's end
    rest = walk_from(broker, "queue:q", first, max_messages=4)
    assert seqs([first, *rest]) == list(range(1, 11))
    assert len(looking.browse(broker, "queue:q")) == 15  # a new walk sees them


def walk_from(broker: Broker, address: str, page: BrowsePage, **bounds: Any) -> list[BrowsePage]:
    pages: list[BrowsePage] = []
    while not page.done:
        page = looking.browse_page(broker, address, after=page.after, before=page.before, **bounds)
        pages.append(page)
    return pages


def test_messages_gone_before_the_walk_reached_them_are_not_shown(broker: Broker) -> None:
    fill(broker, "queue:q", 10)
    first = looking.browse_page(broker, "queue:q", max_messages=3)
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    recorder = Recorder()
    consumer = s.consumer(1, "queue:q", recorder, prefetch=6)
    taken = recorder.take()
    for entry in taken:  # seqs 1-6: three the walk covered, three ahead of it
        s.ack(consumer, entry.seq)
    rest = walk_from(broker, "queue:q", first, max_messages=3)
    assert seqs([first, *rest]) == [1, 2, 3, 7, 8, 9, 10]


def test_messages_in_flight_are_shown_in_their_place_and_once(broker: Broker) -> None:
    fill(broker, "queue:q", 6)
    conn = BrokerConnection(broker)
    s = conn.session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = s.consumer(1, "queue:q", recorder, prefetch=2)
    first = looking.browse_page(broker, "queue:q", max_messages=3)
    assert [(e.seq, e.delivery_count) for e in first.entries] == [(1, 1), (2, 1), (3, 0)]
    s.close_consumer(consumer)  # 1 and 2 go back, redelivered: behind the walk already
    rest = walk_from(broker, "queue:q", first, max_messages=3)
    assert seqs([first, *rest]) == list(range(1, 7))


def test_a_prepared_send_committed_during_the_walk_is_shown_in_its_place(broker: Broker) -> None:
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send("queue:q", msg(b"prepared"))
    tx.prepare("x")  # numbered 1, placed at commit
    fill(broker, "queue:q", 4)  # 2..5
    first = looking.browse_page(broker, "queue:q", max_messages=2)
    assert seqs([first]) == [2, 3]
    broker.xa.commit("x")
    queue = broker.queues["queue:q"]
    assert queue.out_of_order  # 1 sits behind 2..5 in its lane
    assert seqs(walk(broker, "queue:q", max_messages=2)) == [1, 2, 3, 4, 5]
    assert seqs(walk_from(broker, "queue:q", first, max_messages=2)) == [4, 5]
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "queue:q", Recorder(), prefetch=9)
    assert queue.ready == 0
    assert seqs(walk(broker, "queue:q")) == [1, 2, 3, 4, 5]  # in flight, in sequence order
    assert not queue.out_of_order  # the scan found the lanes in order (empty) again


@pytest.fixture(params=["memory", "journal"])
def paging_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store: Store
    if request.param == "memory":
        store = MemoryStore()
    else:
        store = Journal(tmp_path / "journal", sync="never", segment_size=256 << 10)
    yield store
    store.close()


def test_a_walk_reads_paged_messages_from_the_store_page_by_page(paging_store: Store) -> None:
    broker = Broker(paging_store, memory_limit=32 << 10)
    broker.recover()
    s = BrokerConnection(broker).session()
    for i in range(1500):
        s.send("queue:q", Message.create(BODY + str(i).encode(), priority=i % 10))
    queue = broker.queues["queue:q"]
    assert queue.paged > 1000  # most live in the store only
    pages = walk(broker, "queue:q", max_messages=100)
    assert seqs(pages) == list(range(1, 1501))
    assert [e.message.body for p in pages for e in p.entries] == [
        BODY + str(i).encode() for i in range(1500)
    ]
    assert all(len(p.entries) <= 100 for p in pages)
    size = pages[0].entries[0].message.size
    assert max(len(p.entries) for p in walk(broker, "queue:q", max_bytes=10 * size)) == 10
    assert queue.held == 1500
    assert queue.paged > 1000  # browsing reads back nothing into the queue
    odd = walk(broker, "queue:q", selector="JMSPriority = 9")
    assert seqs(odd) == list(range(10, 1501, 10))


def test_a_page_built_in_steps_is_the_page_built_at_once(paging_store: Store) -> None:
    broker = Broker(paging_store, memory_limit=32 << 10)
    broker.recover()
    fill(broker, "queue:q", 600)
    assert broker.queues["queue:q"].paged > 300
    steps = looking.browse_steps(broker, "queue:q", max_messages=200)
    taken = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            page: BrowsePage = done.value
            break
        taken += 1
    assert taken == -(-200 // STEP_MESSAGES) - 1  # a step per STEP_MESSAGES; the last returns
    assert seqs([page]) == list(range(1, 201))
    assert seqs([page]) == seqs([looking.browse_page(broker, "queue:q", max_messages=200)])
    assert not page.done


def test_messages_consumed_between_steps_of_a_page_are_not_shown(broker: Broker) -> None:
    fill(broker, "queue:q", 3 * STEP_MESSAGES)
    steps = looking.browse_steps(broker, "queue:q")
    next(steps)  # the first step covered 1..STEP_MESSAGES
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    recorder = Recorder()
    consumer = s.consumer(1, "queue:q", recorder, prefetch=2 * STEP_MESSAGES)
    for entry in recorder.take():  # 1..2*STEP_MESSAGES: half of them ahead of the walk
        s.ack(consumer, entry.seq)
    page = finish(steps)
    shown = list(range(1, STEP_MESSAGES + 1)) + list(
        range(2 * STEP_MESSAGES + 1, 3 * STEP_MESSAGES + 1)
    )
    assert seqs([page]) == shown
    assert page.done


def test_a_later_step_keeps_the_page_within_its_bytes(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for i in range(STEP_MESSAGES):
        s.send("queue:q", msg(b"s%d" % i))
    s.send("queue:q", msg(b"B" * 5000))  # the first of the next step: it does not fit
    small = sum(e.message.size for e in looking.browse(broker, "queue:q")[:STEP_MESSAGES])
    page = looking.browse_page(broker, "queue:q", max_bytes=small + 1000)
    assert len(page.entries) == STEP_MESSAGES
    assert not page.done
    rest = looking.browse_page(
        broker, "queue:q", after=page.after, before=page.before, max_bytes=100
    )
    assert [e.message.body for e in rest.entries] == [b"B" * 5000]  # alone, whatever its size
