"""``chute.connect("dropbox:///...")``: the client API over real files, no broker."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import chute
from chute.dropbox.client import DropboxConnection
from chute.dropbox.layout import init_queue, topic_layout
from chute.dropbox.options import parse_dropbox_url
from chute.dropbox.transcoder import decode_filename
from chute.errors import (
    ConnectError,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    InvalidSelector,
    TransactionError,
)
from chute.message import BodyKind


def open_root(root: Path, client: str = "c1", **query: str) -> DropboxConnection:
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    conn = chute.connect(f"dropbox://{root}?client_id={client}&sync=false{extra}")
    assert isinstance(conn, DropboxConnection)
    return conn


def names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_send_and_receive_keep_every_field(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        s.send(
            "queue:orders",
            "hello",
            priority=7,
            ttl=60_000,
            properties={"region": "eu", "n": 3, "ok": True},
            correlation_id="c.1",
            reply_to="queue:replies",
            type="Order",
            id="ID:order-1",
        )
        received = s.consumer("orders").receive(timeout=1)
    assert received is not None
    assert received.body == b"hello"
    assert received.kind is BodyKind.TEXT
    assert (received.id, received.priority, received.correlation_id) == ("ID:order-1", 7, "c.1")
    assert (received.reply_to, received.type) == ("queue:replies", "Order")
    assert received.properties == {"region": "eu", "n": 3, "ok": True}
    assert received.expiration > time.time() * 1000
    assert received.delivery_count == 1
    assert not received.redelivered
    layout = init_queue(tmp_path, "orders")
    assert names(layout.target) == names(layout.processing) == []
    assert len(names(layout.processed)) == 1  # auto ack: settled on receive


def test_receive_gives_priority_order_then_send_order(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        for i in range(5):
            s.send("q", f"low{i}", priority=1)
        s.send("q", "high", priority=9)
        c = s.consumer("q")
        got = []
        while (m := c.receive(timeout=0)) is not None:
            got.append(m.text)
    assert got == ["high", "low0", "low1", "low2", "low3", "low4"]


def test_client_ack_is_cumulative_and_individual_is_not(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn:
        with conn.session() as s:
            for i in range(4):
                s.send("q", f"m{i}")
        layout = init_queue(tmp_path, "q")
        with conn.session(ack="client") as s:
            c = s.consumer("q")
            msgs = [c.receive(timeout=0) for _ in range(3)]
            assert all(m is not None for m in msgs)
            assert len(names(layout.processing)) == 3
            msgs[1].ack()  # type: ignore[union-attr]
            assert len(names(layout.processing)) == 1  # m0 and m1 settled
            assert len(names(layout.processed)) == 2
        with conn.session(ack="individual") as s:
            c = s.consumer("q")
            first = c.receive(timeout=0)
            second = c.receive(timeout=0)
            assert first is not None
            assert second is not None
            second.ack()
            assert len(names(layout.processing)) == 1
            first.ack()
            with pytest.raises(ConsumerError):
                first.ack()
    assert names(layout.processing) == names(layout.target) == []
    assert len(names(layout.processed)) == 4


def test_unacked_messages_come_back_redelivered_when_the_consumer_closes(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn:
        with conn.session() as s:
            s.send("q", "once")
        with conn.session(ack="client") as s:
            assert s.consumer("q").receive(timeout=0) is not None
        with conn.session(ack="client") as s:
            again = s.consumer("q").receive(timeout=0)
            assert again is not None
            assert again.redelivered
            assert again.delivery_count == 2
            again.ack()


def test_nack_requeues_or_rejects_to_error(tmp_path: Path) -> None:
    layout = init_queue(tmp_path, "q")
    with open_root(tmp_path, redelivery_attempts="1") as conn, conn.session(ack="client") as s:
        s.send("q", "x")
        c = s.consumer("q")
        m = c.receive(timeout=0)
        assert m is not None
        m.nack()  # back to target/ (attempt 1 of 1)
        m = c.receive(timeout=0)
        assert m is not None
        assert m.redelivered
        m.nack()  # past the limit: error/
        assert c.receive(timeout=0) is None
        assert len(names(layout.error)) == 1
        s.send("q", "y")
        m = c.receive(timeout=0)
        assert m is not None
        m.nack(requeue=False)
        assert len(names(layout.error)) == 2


def test_a_transaction_writes_on_commit_and_gives_back_on_rollback(tmp_path: Path) -> None:
    layout = init_queue(tmp_path, "q")
    with open_root(tmp_path) as conn, conn.session(transacted=True) as s:
        s.send("q", "a")
        s.send("q", "b")
        assert names(layout.target) == []
        s.commit()
        assert len(names(layout.target)) == 2
        c = s.consumer("q")
        assert c.receive(timeout=0) is not None
        s.rollback()
        assert len(names(layout.target)) == 2  # the received one is back
        got = [c.receive(timeout=0), c.receive(timeout=0)]
        assert all(g is not None for g in got)
        s.send("q", "c")
        s.rollback()  # the send is dropped, the two received go back
        assert len(names(layout.target)) == 2
        got = [c.receive(timeout=0), c.receive(timeout=0)]
        s.commit()
        assert names(layout.processing) == names(layout.target) == []
        with pytest.raises(TransactionError):
            s.prepare("xid-1")
    with open_root(tmp_path) as conn, conn.session() as s, pytest.raises(TransactionError):
        s.commit()


def test_a_topic_reaches_every_subscription_that_exists(tmp_path: Path) -> None:
    with open_root(tmp_path, "alice") as a, open_root(tmp_path, "bob") as b:
        sa, sb = a.session(), b.session()
        durable = sa.consumer("topic:news.eu", subscription="daily", durable=True)
        passing = sb.consumer("topic:news.eu")
        sa.send("topic:news.eu", "headline", properties={"n": 1})
        got_a = durable.receive(timeout=1)
        got_b = passing.receive(timeout=1)
        assert got_a is not None
        assert got_b is not None
        assert got_a.id == got_b.id
        assert got_a.text == got_b.text == "headline"
        topic = topic_layout(tmp_path, "news.eu")
        subs = names(topic.subscriptions_dir)
        assert "daily.alice" in subs
        assert len(subs) == 2
        passing.close()  # a non-durable subscription goes with its consumer
        assert names(topic.subscriptions_dir) == ["daily.alice"]
        durable.close()
        sa.send("topic:news.eu", "while away")
        assert sa.consumer("topic:news.eu", subscription="daily", durable=True).receive(1)
        sa.unsubscribe("daily")
        assert names(topic.subscriptions_dir) == []
        with pytest.raises(ConsumerError):
            sa.unsubscribe("daily")


def test_unsubscribe_of_a_name_with_a_star_deletes_only_that_subscription(
    tmp_path: Path,
) -> None:
    with open_root(tmp_path, client="alice") as conn, conn.session() as s:
        s.consumer("topic:news", subscription="abc", durable=True).close()
        with pytest.raises(ConsumerError):
            s.unsubscribe("a*")  # no subscription is named a*: nothing goes
        assert names(topic_layout(tmp_path, "news").subscriptions_dir) == ["abc.alice"]


def test_a_selector_leaves_other_files_where_they_are(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        s.send("q", "eu", properties={"region": "eu"})
        s.send("q", "us", properties={"region": "us"})
        c = s.consumer("q", selector="region = 'us'")
        m = c.receive(timeout=0)
        assert m is not None
        assert m.text == "us"
        assert c.receive(timeout=0) is None
        assert [m.text for m in s.browse("q")] == ["eu"]
        with pytest.raises(InvalidSelector):
            s.consumer("q", selector="region = ")


def test_browse_is_a_snapshot_in_the_order_sent(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        s.send("q", "one", priority=1)
        s.send("q", "two", priority=8)
        target = init_queue(tmp_path, "q").target
        (target / "4.1000000-1.T.1000").write_bytes(b"expired in 1970")
        assert [m.text for m in s.browse("q")] == ["one", "two"]  # priorities: no
        assert [m.text for m in s.browse("q", limit=1)] == ["one"]
        assert len(names(target)) == 3  # nothing consumed
        walk = s.iter_browse("q")
        assert next(walk).text == "one"
        two = next(n for n in names(target) if decode_filename(n).priority == 8)
        (target / two).unlink()  # claimed before the walk reached it: left out
        assert list(walk) == []


def test_receive_wakes_when_a_file_arrives(tmp_path: Path) -> None:
    with open_root(tmp_path, poll_ms="5000") as conn, conn.session() as s:
        c = s.consumer("q")
        assert c.receive(timeout=0.05) is None

        def later() -> None:
            with open_root(tmp_path, "producer") as other, other.session() as ps:
                ps.send("q", "wake up")

        started = time.monotonic()
        threading.Timer(0.2, later).start()
        m = c.receive(timeout=10)
        waited = time.monotonic() - started
    assert m is not None
    assert m.text == "wake up"
    assert waited < 4  # inotify: well before the 5 s polling interval


def test_receive_times_out_with_none(tmp_path: Path) -> None:
    with open_root(tmp_path, poll_ms="20") as conn, conn.session() as s:
        started = time.monotonic()
        assert s.consumer("q").receive(timeout=0.2) is None
        assert 0.15 < time.monotonic() - started < 5


@pytest.mark.parametrize(
    "address", ["queue:../etc", "a/b", "..", "queue:.hidden", "topic:a..b", "topic-root", "q/../x"]
)
def test_a_name_that_would_leave_the_root_is_refused(tmp_path: Path, address: str) -> None:
    with open_root(tmp_path / "root") as conn, conn.session() as s:
        with pytest.raises(InvalidAddress):
            s.send(address, "x")
        with pytest.raises(InvalidAddress):
            s.consumer(address)
    assert names(tmp_path) == ["root"]
    assert names(tmp_path / "root") == []


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("dropbox://server/srv/mq", "local directory"),
        ("dropbox:///srv/mq?poll_ms=abc", "bad value"),
        ("dropbox:///srv/mq?poll_ms=0", "bad value"),
        ("dropbox:///srv/mq?colour=red", "unknown option"),
        ("dropbox:///srv/mq?client_id=" + "x" * 80, "longer than"),
        ("dropbox:///srv/mq?consumers=javaC," + "x" * 80, "bad value"),
        ("dropbox:", "no directory"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, fragment: str) -> None:
    with pytest.raises(ConnectError, match=fragment):
        parse_dropbox_url(url)


def test_the_socket_client_points_dropbox_urls_to_chute_connect() -> None:
    from chute.client import connect as connect_broker

    with pytest.raises(ConnectError, match=r"chute\.connect"):
        connect_broker("dropbox:///srv/mq")


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConnectError, match="cannot use dropbox root"):
        chute.connect(f"dropbox://{tmp_path / 'file'}")


def test_what_needs_a_broker_is_refused_clearly(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        with pytest.raises(ConsumerError, match="need a broker"):
            s.consumer("q", exclusive=True)
        with pytest.raises(chute.ChuteError, match="need a broker"):
            s.callback("topic:t", "cb", "queue:q")
        with pytest.raises(TransactionError):
            conn.commit_prepared("x")
        assert conn.prepared() == []


def test_temporary_queues_go_with_the_connection(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session() as s:
        address = s.temporary_queue()
        s.send(address, "reply")
        m = s.consumer(address).receive(timeout=0)
        assert m is not None
        assert m.text == "reply"
        assert names(tmp_path) == sorted(["dropboxmq", address.removeprefix("queue:")])
    assert names(tmp_path) == ["dropboxmq"]  # DropboxMQ's own directory stays with the root


def test_stat_counts_depth_and_inflight(tmp_path: Path) -> None:
    with open_root(tmp_path) as conn, conn.session(ack="client") as s:
        for _ in range(3):
            s.send("q", "x")
        assert s.consumer("q").receive(timeout=0) is not None
        stats = conn.stat()
    assert stats["destinations"] == [{"address": "queue:q", "depth": 2, "inflight": 1}]


def test_a_read_locked_queue_looks_empty_to_a_consumer_until_the_lock_goes(
    tmp_path: Path,
) -> None:
    with open_root(tmp_path, poll_ms="20") as conn, conn.session() as s:
        s.send("q", "held")
        lock = tmp_path / "q" / "incoming" / "read-lock"
        lock.touch()
        consumer = s.consumer("q")
        assert consumer.receive(timeout=0.1) is None
        lock.unlink()
        m = consumer.receive(timeout=5)
        assert m is not None
        assert m.text == "held"


def test_a_write_locked_send_fails_after_block_timeout_ms(tmp_path: Path) -> None:
    (init_queue(tmp_path, "q").base / "write-lock.properties").touch()
    with (
        open_root(tmp_path, block_timeout_ms="50", poll_ms="10") as conn,
        conn.session() as s,
        pytest.raises(DestinationFull, match="queue:q: write-locked"),
    ):
        s.send("q", "stopped")
    assert names(tmp_path / "q" / "incoming" / "target") == []


def test_a_write_locked_commit_keeps_its_sends_for_a_retry(tmp_path: Path) -> None:
    lock = init_queue(tmp_path, "q").base / "write-lock.properties"
    lock.touch()
    with (
        open_root(tmp_path, block_timeout_ms="50", poll_ms="10") as conn,
        conn.session(transacted=True) as s,
    ):
        s.send("q", "one")
        s.send("q", "two")
        with pytest.raises(DestinationFull):
            s.commit()
        assert names(tmp_path / "q" / "incoming" / "target") == []
        lock.unlink()
        s.commit()
        bodies = sorted(m.text for m in s.browse("q"))
    assert bodies == ["one", "two"]


def test_block_timeout_ms_is_a_url_option() -> None:
    assert parse_dropbox_url("dropbox:///mq").block_timeout == 30.0
    assert parse_dropbox_url("dropbox:///mq").consumers == ()
    assert parse_dropbox_url("dropbox:///mq?consumers=javaC,app-1").consumers == ("javaC", "app-1")
    assert parse_dropbox_url("dropbox:///mq?block_timeout_ms=250").block_timeout == 0.25
    with pytest.raises(ConnectError, match="block_timeout_ms"):
        parse_dropbox_url("dropbox:///mq?block_timeout_ms=-1")
