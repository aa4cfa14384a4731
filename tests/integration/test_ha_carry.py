"""What carries over when a backup takes its node over from a live killed with
``kill -9`` (docs/ha.md, "What is guaranteed"): two-phase transactions prepared,
durable subscriptions with messages waiting, a topic cursor's place, a stream's
offsets and the dead-letter queue. Real etcd, real ``chute serve`` processes, the
native client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

import chute
from chute.errors import TransactionLost
from tests.integration.conftest import ChuteServer
from tests.integration.test_cluster_nodes import until
from tests.integration.test_ha import DEADLINE, QUEUE, Pair, kill
from tests.integration.test_ha import pair as pair  # noqa: PLC0414

from . import sync_aio

DEAD_LETTERS = "queue:__sys__deadLetter"
CLIENT_ID = "carry"

Connect = Callable[[str], chute.Connection]


def test_what_the_journal_holds_carries_over_to_the_backup_that_takes_over(
    pair: Pair,
) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    with chute.connect(live.url, client_id=CLIENT_ID) as conn:
        _leave_behind(conn)
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    with chute.connect(backup.url, client_id=CLIENT_ID) as conn:
        _find_again(conn)


def _leave_behind(conn: chute.Connection) -> None:
    """On the live: one of each thing that must carry over."""
    s = conn.session()
    # a two-phase transaction that took a job and sent its result, prepared
    s.send("queue:in", "job")
    tx = conn.session(ack="client", transacted=True)
    job = tx.consumer("queue:in", prefetch=1).receive(timeout=DEADLINE)
    assert job is not None
    tx.send("queue:out", "result of job")
    tx.prepare("xa-1")
    # a durable subscription, away, with messages waiting for it
    s.consumer("topic:news", subscription="audit", durable=True).close()
    for n in range(3):
        s.send("topic:news", f"news-{n}")
    # a topic cursor that read four messages and acked the first two
    conn.cursor_open("topic:feed", "reader")
    for n in range(4):
        s.send("topic:feed", f"feed-{n}")
    start, head = conn.cursor_open("topic:feed", "reader")
    after_two, page = conn.cursor_fetch("topic:feed", "reader", start, head, max_messages=2)
    assert [m.text for _, m in page] == ["feed-0", "feed-1"]
    conn.cursor_ack("topic:feed", "reader", after_two)
    conn.cursor_close("topic:feed", "reader")
    # a stream of five messages, at offsets 1..5: confirmed once stored, they are in the
    # stream once the node knows it is the stream's home (asked of etcd at the first
    # send; until then they wait, stored: docs/cluster.md, "Streams in a cluster")
    for n in range(5):
        s.send("stream:log", f"log-{n}")
    until(lambda: conn.cursor_open("stream:log") == (1, 6), "the five in the stream")
    # a message refused for good, in the dead-letter queue
    s.send("queue:work", "poison")
    rejecting = conn.session(ack="client")
    poison = rejecting.consumer("queue:work", prefetch=1).receive(timeout=DEADLINE)
    assert poison is not None
    poison.nack(requeue=False)
    assert [m.text for m in s.browse(DEAD_LETTERS)] == ["poison"]
    s.send("queue:barrier", "last")  # confirmed: so is everything the journal took before


def _find_again(conn: chute.Connection) -> None:
    """On the backup that took over: what :func:`_leave_behind` left, as it was."""
    s = conn.session()
    assert conn.prepared() == ["xa-1"]
    assert s.browse("queue:in") == []  # the job is locked by the prepared transaction
    assert s.browse("queue:out") == []
    conn.commit_prepared("xa-1")
    assert conn.prepared() == []
    assert [m.text for m in s.browse("queue:out")] == ["result of job"]
    assert s.browse("queue:in") == []

    audit = s.consumer("topic:news", subscription="audit", durable=True)
    got = [audit.receive(timeout=DEADLINE) for _ in range(3)]
    assert [m.text if m else None for m in got] == ["news-0", "news-1", "news-2"]
    audit.close()

    start, head = conn.cursor_open("topic:feed", "reader")
    _, page = conn.cursor_fetch("topic:feed", "reader", start, head)
    assert [m.text for _, m in page] == ["feed-2", "feed-3"]  # on from its ack
    conn.cursor_close("topic:feed", "reader", delete=True)

    assert conn.cursor_open("stream:log") == (1, 6)
    s.send("stream:log", "log-5")
    first, head = conn.cursor_open("stream:log")
    assert (first, head) == (1, 7)  # the offsets go on from where they were
    _, page = conn.cursor_fetch("stream:log", None, first, head)
    assert [(seq, m.text) for seq, m in page] == [(n + 1, f"log-{n}") for n in range(6)]

    [dead] = s.browse(DEAD_LETTERS)
    assert dead.text == "poison"
    assert s.browse("queue:work") == []


@pytest.fixture(params=["blocking", "asyncio"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """Opens connections with the client the test is for; closes them at its end."""
    opened: list[chute.Connection] = []
    runner = sync_aio.LoopThread() if request.param == "asyncio" else None

    def open_one(url: str) -> chute.Connection:
        conn: chute.Connection = (
            chute.connect(url) if runner is None else sync_aio.connect(runner, url)
        )
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        conn.close()
    if runner is not None:
        runner.close()


def _both(pair: Pair) -> tuple[ChuteServer, ChuteServer, str]:
    """The live, its backup in sync, and a URL naming both (the live first)."""
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    return live, backup, f"{live.url},127.0.0.1:{backup.port}?order=listed"


def test_a_consumer_gets_its_unacked_messages_again_flagged_redelivered(
    pair: Pair, connect: Connect
) -> None:
    live, backup, url = _both(pair)
    conn = connect(url)
    producer = conn.session()
    for n in range(3):
        producer.send(QUEUE, f"job-{n}")
    consumer = conn.session(ack="client").consumer(QUEUE, prefetch=10)
    first = [consumer.receive(DEADLINE) for _ in range(3)]
    assert [m.text if m else None for m in first] == ["job-0", "job-1", "job-2"]
    assert not any(m.redelivered for m in first if m)
    producer.send("queue:barrier", "last")  # confirmed: the deliveries before it are too
    kill(live)  # a receive waits for the move to the backup, once it took over
    again = [consumer.receive(DEADLINE) for _ in range(3)]
    assert [m.text if m else None for m in again] == ["job-0", "job-1", "job-2"]
    assert all(m is not None and m.redelivered for m in again)
    assert conn.node == f"127.0.0.1:{backup.port}"
    assert again[-1] is not None
    again[-1].ack()
    assert consumer.receive(0.5) is None
    with chute.connect(backup.url) as other, other.session() as s:
        end = time.monotonic() + DEADLINE
        while s.browse(QUEUE):
            assert time.monotonic() < end, "the acks on the new live did not arrive"


@pytest.mark.parametrize("finish", ["commit", "prepare"])
def test_a_transaction_in_progress_fails_with_an_error_that_says_to_retry_it(
    pair: Pair, connect: Connect, finish: str
) -> None:
    """Its commit (or prepare) comes right after the kill, while the connection is still
    moving: it waits for the move and raises the error that says to retry."""
    live, backup, url = _both(pair)
    conn = connect(url)
    conn.session().send("queue:in", "job")
    tx = conn.session(ack="client", transacted=True)
    consumer = tx.consumer("queue:in", prefetch=1)
    job = consumer.receive(DEADLINE)
    assert job is not None
    tx.send("queue:out", "result, lost with the live")
    kill(live)
    with pytest.raises(TransactionLost, match="retry the transaction"):
        tx.commit() if finish == "commit" else tx.prepare("xa-lost")
    assert conn.node == f"127.0.0.1:{backup.port}"
    # the retry, from the start: the job comes again, redelivered
    job = consumer.receive(DEADLINE)
    assert job is not None
    assert (job.text, job.redelivered) == ("job", True)
    tx.send("queue:out", "result")
    tx.commit()
    assert conn.prepared() == []
    with chute.connect(backup.url) as other, other.session() as s:
        assert [m.text for m in s.browse("queue:out")] == ["result"]
        assert s.browse("queue:in") == []
