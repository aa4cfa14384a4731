"""One behavioural suite for the client API (chute.client.api), run against every client.

* ``blocking``: :mod:`chute.client.blocking` to a real ``chute serve``;
* ``asyncio``: :mod:`chute.client.aio_client` to the same broker, driven through the
  blocking facade of ``sync_aio`` (its own event loop thread);
* ``dropbox``: :mod:`chute.dropbox.client` on a temporary directory, no broker.

The two broker clients run the suite over every way to the broker: TCP
(``chute://``), TLS (``chutes://``), a WebSocket (``ws://``, ``wss://``) and plain
requests (``http://``, ``https://``). Two brokers serve them: one plain, one with
TLS on its native and HTTP ports (certificates from ``trustme``).

Every test body is written once against :class:`chute.Connection`. Where a
client cannot do something (the dropbox: cursors, two-phase transactions,
callback queues, exclusive consumers), the test asserts the documented error
instead of skipping. Each test uses destinations of its own, so the broker is
shared by the module. Absence is checked with a short receive timeout; nothing
sleeps to synchronise.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

import chute
from chute.errors import (
    ChuteError,
    ConsumerError,
    DestinationDeleted,
    DestinationFull,
    InvalidAddress,
    InvalidMessage,
    NotFound,
    TransactionError,
)
from chute.message import BodyKind, Byte, Float, Int, Message, Short

from . import sync_aio
from .conftest import ChuteServer, free_port, start_server

TRANSPORTS = ("tcp", "tls", "ws", "wss", "http", "https")
CLIENTS = [
    *((name, transport) for name in ("blocking", "asyncio") for transport in TRANSPORTS),
    ("dropbox", "files"),
]
WAIT = 10.0
"""Seconds a receive waits for a message that must come."""
ABSENT = 0.3
"""Seconds a receive waits for a message that must not come."""


@dataclass
class Client:
    """One client under test: ``connect()`` opens a connection (closed after the test)."""

    name: str
    connect: Callable[..., chute.Connection]
    names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def broker(self) -> bool:
        return self.name != "dropbox"

    def address(self, kind: str = "queue") -> str:
        return f"{kind}:api.{uuid.uuid4().hex[:10]}.{next(self.names)}"


SMALL = "queue:api.small"
"""Addresses under this prefix hold at most SMALL_MAX messages and refuse more."""
SMALL_MAX = 2


@dataclass
class Broker:
    """A ``chute serve`` for the suite: its native port and HTTP port, plain or TLS."""

    server: ChuteServer
    native: int
    http: int
    ca: Path | None = None  # TLS on both ports, signed by this CA

    def url(self, transport: str) -> str:
        if transport in ("tcp", "tls"):
            return f"{'chutes' if self.ca else 'chute'}://127.0.0.1:{self.native}"
        scheme = "ws" if transport in ("ws", "wss") else "http"
        return f"{scheme}{'s' if self.ca else ''}://127.0.0.1:{self.http}/chute"


def _start(home: Path, *extra: str, ca: Path | None = None) -> Broker:
    config = home / "chute.toml"
    config.write_text(
        f"[server]\nhttp_tls = {'true' if ca else 'false'}\n"
        f'[destinations."{SMALL}.*"]\nmax_messages = {SMALL_MAX}\noverflow = "reject"\n'
    )
    native, http = free_port(), free_port()
    ports = ["--tls-port", str(native)] if ca else []
    server = start_server(
        home, "--config", str(config), "--http-port", str(http), *ports, *extra, port=free_port()
    )
    return Broker(server, native if ca else server.port, http, ca)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    started = _start(tmp_path_factory.mktemp("broker"))
    yield started
    started.server.stop()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    home = tmp_path_factory.mktemp("tls-broker")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(home / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(home / "b.pem"))
    started = _start(home, "--tls-cert", str(home / "b.pem"), ca=home / "ca.pem")
    yield started
    started.server.stop()


@pytest.fixture(params=CLIENTS, ids="-".join)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Client]:
    opened: list[chute.Connection] = []
    runner: sync_aio.LoopThread | None = None
    name, transport = request.param
    if name == "dropbox":
        root = tmp_path / "dropbox"

        def open_dropbox(client_id: str = "c1") -> chute.Connection:
            return chute.connect(f"dropbox://{root}?client_id={client_id}&sync=false&poll_ms=20")

        make: Callable[..., chute.Connection] = open_dropbox
    else:
        tls = transport in ("tls", "wss", "https")
        serving: Broker = request.getfixturevalue("tls_broker" if tls else "broker")
        url = serving.url(transport)
        tls_ca = str(serving.ca) if serving.ca else None
        if name == "asyncio":
            runner = sync_aio.LoopThread()
            loop = runner

            def open_aio(client_id: str = "c1") -> chute.Connection:
                return sync_aio.connect(
                    loop, url, client_id=f"{client_id}-{uuid.uuid4().hex}", tls_ca=tls_ca
                )

            make = open_aio
        else:

            def open_blocking(client_id: str = "c1") -> chute.Connection:
                return chute.connect(
                    url, client_id=f"{client_id}-{uuid.uuid4().hex}", tls_ca=tls_ca
                )

            make = open_blocking

    def tracked(*args: str) -> chute.Connection:
        conn = make(*args)
        opened.append(conn)
        return conn

    yield Client(name, tracked)
    for conn in opened:
        conn.close()
    if runner is not None:
        runner.close()


def receive(consumer: chute.Consumer) -> chute.Received:
    message = consumer.receive(timeout=WAIT)
    assert message is not None, "no message arrived"
    return message


def drain(consumer: chute.Consumer) -> list[str]:
    """The texts of every message until none comes within ABSENT."""
    got: list[str] = []
    while (message := consumer.receive(timeout=ABSENT)) is not None:
        got.append(message.text)
    return got


# -- producing and consuming ------------------------------------------------------------


JAVA_MAP = b"\xac\xed\x00\x05sr\x00\x11java.util.HashMap\x00\xff"


def test_every_field_and_typed_property_round_trips(client: Client) -> None:
    q = client.address()
    properties = {
        "region": "eu",
        "n": 3,
        "ok": True,
        "ratio": 0.25,
        "b": Byte(-1),
        "s": Short(2),
        "i": Int(70000),
        "f": Float(0.5),
    }
    with client.connect() as conn, conn.session() as s:
        s.send(
            q,
            "hello",
            priority=7,
            ttl=60_000,
            properties=properties,
            correlation_id="c.1",
            reply_to="queue:replies",
            type="Order",
            id="ID:order-1",  # JMS-shaped: a dropbox shows every id behind "ID:"
        )
        # a map body as Java serializes it (a dropbox refuses any other: DropboxMQ reads it so)
        s.send(q, JAVA_MAP, kind=BodyKind.MAP, persistent=False)
        c = s.consumer(q)
        first, second = receive(c), receive(c)
    assert (first.text, first.kind, first.id, first.priority) == (
        "hello",
        BodyKind.TEXT,
        "ID:order-1",
        7,
    )
    assert (first.correlation_id, first.reply_to, first.type) == ("c.1", "queue:replies", "Order")
    assert first.properties == properties
    assert {k: type(v) for k, v in first.properties.items()} == {
        k: type(v) for k, v in properties.items()
    }
    assert first.expiration > time.time() * 1000
    assert first.persistent
    assert not first.redelivered
    assert (second.body, second.kind) == (JAVA_MAP, BodyKind.MAP)
    assert second.persistent is not client.broker  # a dropbox file reads back persistent
    assert second.id not in ("", first.id)  # generated


def test_priority_first_then_send_order(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for i in range(3):
            s.send(q, f"low{i}", priority=1)
        s.send(q, "high", priority=9)
        s.send(q, "normal")
        assert drain(s.consumer(q, prefetch=1)) == ["high", "normal", "low0", "low1", "low2"]


def test_a_selector_takes_only_what_it_selects(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for region, n in (("eu", 1), ("us", 2), ("eu", 3)):
            s.send(q, f"{region}{n}", properties={"region": region, "n": n})
        assert drain(s.consumer(q, selector="region = 'eu' AND n > 1")) == ["eu3"]
        assert drain(s.consumer(q)) == ["eu1", "us2"]  # left where they were


def test_an_expired_message_is_never_delivered(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        s.send(q, "stale", ttl=1)
        sent = time.time()
        s.send(q, "fresh", ttl=60_000)
        while time.time() < sent + 0.01:  # the clock, not another party: wait past the ttl
            time.sleep(0.002)
        assert drain(s.consumer(q)) == ["fresh"]


def test_browse_is_a_snapshot_in_sequence_order_that_consumes_nothing(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for i, priority in enumerate((1, 5, 5, 9)):
            s.send(q, f"m{i}", priority=priority, properties={"i": i})
        assert [m.text for m in s.browse(q)] == ["m0", "m1", "m2", "m3"]  # priorities: no
        assert [m.text for m in s.browse(q, "i > 0", limit=2)] == ["m1", "m2"]
        assert drain(s.consumer(q)) == ["m3", "m1", "m2", "m0"]
        assert s.browse(q) == []


def test_iter_browse_walks_a_queue_page_by_page(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for i in range(7):
            s.send(q, f"m{i}", properties={"i": i})
        walk = [m.text for m in s.iter_browse(q, page_messages=2)]
        assert walk == [f"m{i}" for i in range(7)]
        assert [m.text for m in s.iter_browse(q, "i >= 5", page_messages=2)] == ["m5", "m6"]
        assert list(s.iter_browse(client.address())) == []  # nothing made: nothing there
        halfway = iter(s.iter_browse(q, page_messages=2))
        assert next(halfway).text == "m0"
        del halfway  # given up
        assert [m.text for m in s.browse(q, limit=3)] == ["m0", "m1", "m2"]
        assert len(drain(s.consumer(q))) == 7  # nothing was consumed


def test_stat_lists_what_a_pattern_names(client: Client) -> None:
    prefix = client.address()
    with client.connect() as conn, conn.session() as s:
        for i in range(5):
            s.send(f"{prefix}.{i}", "x")
        s.send(f"{prefix}x", "x")
        named = conn.stat(f"{prefix}.*", page_size=2)["destinations"]
        assert [d["address"] for d in named] == [f"{prefix}.{i}" for i in range(5)]
        assert [d["depth"] for d in named] == [1] * 5
        [one] = conn.stat(f"{prefix}.3")["destinations"]
        assert (one["address"], one["depth"]) == (f"{prefix}.3", 1)
        assert "connections" in conn.stat(f"{prefix}.none")


def test_a_topic_gives_every_subscription_its_copy(client: Client) -> None:
    topic = client.address("topic")
    with client.connect() as conn, conn.session() as s:
        one = s.consumer(topic)
        two = s.consumer(topic, subscription="audit", durable=True)
        s.send(topic, "news")
        assert (receive(one).text, receive(two).text) == ("news", "news")
        two.close()
        s.send(topic, "while away")
        again = s.consumer(topic, subscription="audit", durable=True)
        assert receive(again).text == "while away"
        again.close()
        s.unsubscribe("audit")


def test_a_bad_address_is_refused_before_anything_is_sent(client: Client) -> None:
    with client.connect() as conn, conn.session() as s:
        with pytest.raises(InvalidAddress):
            s.send("queue:../etc", "x")
        with pytest.raises(InvalidAddress):
            s.consumer("queue:a/b")


# -- acknowledgement ---------------------------------------------------------------------


def test_client_ack_is_cumulative_and_the_unacked_come_back_redelivered(client: Client) -> None:
    q = client.address()
    with client.connect() as conn:
        with conn.session() as s:
            for i in range(4):
                s.send(q, f"m{i}")
        with conn.session(ack="client") as s:
            c = s.consumer(q, prefetch=10)
            got = [receive(c) for _ in range(3)]
            got[1].ack()  # m0 and m1
        with conn.session(ack="individual") as s:
            c = s.consumer(q, prefetch=10)
            again, last = receive(c), receive(c)
            assert (again.text, again.redelivered) == ("m2", True)
            assert again.delivery_count == got[2].delivery_count + 1
            assert last.text == "m3"
            last.ack()  # alone: m2 stays unacked
        with conn.session() as s:
            assert drain(s.consumer(q)) == ["m2"]


def test_nack_requeues_or_rejects(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session(ack="client") as s:
        s.send(q, "retry")
        c = s.consumer(q, prefetch=1)
        receive(c).nack()
        again = receive(c)
        assert (again.text, again.redelivered) == ("retry", True)
        again.ack()
        s.send(q, "poison")
        poison = receive(c)
        assert poison.text == "poison"
        poison.nack(requeue=False)  # to the dead letters, never to this queue again
        assert c.receive(timeout=ABSENT) is None


def test_a_taken_message_cannot_be_nacked_in_auto_mode(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        s.send(q, "taken")
        taken = receive(s.consumer(q, prefetch=4))
        with pytest.raises(ConsumerError):
            taken.nack()  # taking acknowledged it
    with client.connect() as conn, conn.session() as s:
        assert drain(s.consumer(q)) == []


def test_nack_in_a_transaction_waits_for_commit(client: Client) -> None:
    """As STOMP's NACK in a transaction (test_stomp_semantics): decided at commit."""
    q = client.address()
    with client.connect() as conn, conn.session(transacted=True) as s:
        s.send(q, "one")
        s.commit()
        c = s.consumer(q, prefetch=1)
        first = receive(c)
        first.nack()
        assert c.receive(timeout=ABSENT) is None  # not applied before the commit
        s.rollback()
        again = receive(c)  # the rolled-back nack gives it back, like a rolled-back ack
        assert (again.text, again.redelivered) == ("one", True)
        assert again.delivery_count == first.delivery_count + 1
        again.nack()
        assert c.receive(timeout=ABSENT) is None
        s.commit()
        third = receive(c)  # the committed nack requeued it
        assert third.delivery_count == first.delivery_count + 2
        third.nack(requeue=False)
        s.commit()  # refused for good: to the dead letters
        assert c.receive(timeout=ABSENT) is None
        with pytest.raises(ConsumerError):
            third.nack()  # settled by the commit: no longer waiting


def test_a_nack_in_a_transaction_leaves_the_messages_around_it_to_the_commit(
    client: Client,
) -> None:
    q = client.address()
    with client.connect() as conn, conn.session(transacted=True) as s:
        for i in range(4):
            s.send(q, f"m{i}")
        s.commit()
        c = s.consumer(q, prefetch=2)
        got = [receive(c) for _ in range(4)]
        assert [m.text for m in got] == ["m0", "m1", "m2", "m3"]
        got[1].nack()
        got[3].nack()  # the last one taken: the commit still acks m0 and m2
        s.commit()
        again = [receive(c), receive(c)]
        assert sorted(m.text for m in again) == ["m1", "m3"]
        assert all(m.redelivered for m in again)
        s.commit()
        assert c.receive(timeout=ABSENT) is None


def test_a_nack_of_an_open_transaction_comes_back_when_the_connection_ends(
    client: Client,
) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        s.send(q, "kept")
    with client.connect() as conn, conn.session(transacted=True) as s:
        receive(s.consumer(q)).nack(requeue=False)
    # never committed: closing rolled the transaction back
    with client.connect() as conn, conn.session(ack="individual") as s:
        back = receive(s.consumer(q))
        assert (back.text, back.redelivered) == ("kept", True)
        back.ack()


def test_a_closed_consumer_raises_and_ends_iteration(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        s.send(q, "one")
        c = s.consumer(q)
        assert [m.text for m in itertools.islice(c, 1)] == ["one"]
        c.close()
        assert c.closed
        assert list(c) == []
        with pytest.raises(ConsumerError):
            c.receive(timeout=0)


# -- transactions ------------------------------------------------------------------------


def test_a_transaction_sends_on_commit_and_gives_back_on_rollback(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, client.connect("observer") as observer:
        watch = observer.session()
        tx = conn.session(transacted=True)
        tx.send(q, "a")
        tx.send(q, "b")
        assert watch.browse(q) == []
        tx.commit()
        assert [m.text for m in watch.browse(q)] == ["a", "b"]
        c = tx.consumer(q, prefetch=1)
        assert receive(c).text == "a"
        tx.send(q, "dropped")
        tx.rollback()  # "a" comes back (after "b" if the broker already sent that)
        assert sorted([receive(c).text, receive(c).text]) == ["a", "b"]
        tx.commit()
        assert watch.browse(q) == []
        assert c.receive(timeout=ABSENT) is None  # "dropped" never was
        tx.close()
    with client.connect() as conn, conn.session() as s, pytest.raises(TransactionError):
        s.commit()


def test_send_many_delivers_every_message_in_order_with_its_fields(client: Client) -> None:
    q = client.address()
    big = [f"m{i}".encode() * 4000 for i in range(600)]  # ~5 MiB: several requests
    with client.connect() as conn, conn.session() as s:
        s.send_many(
            q,
            [
                b"plain",
                "text",
                Message(
                    b"full",
                    id="ID:mine-1",
                    priority=7,
                    correlation_id="c-1",
                    reply_to="queue:replies",
                    type="order",
                    properties={"n": Int(5), "ok": True, "s": "x"},
                ),
            ],
        )
        s.send_many(q, big)
        s.send_many(q, [])
        c = s.consumer(q, prefetch=50)
        first = [receive(c) for _ in range(3)]
        rest = [receive(c).body for _ in big]
    # priority 7 goes first, then the rest in the order sent
    assert [m.body for m in first] == [b"full", b"plain", b"text"]
    assert [m.kind for m in first] == [BodyKind.BYTES, BodyKind.BYTES, BodyKind.TEXT]
    assert first[1].id
    assert first[1].id != first[2].id
    full = first[0]
    assert (full.id, full.priority, full.correlation_id, full.reply_to, full.type) == (
        "ID:mine-1",
        7,
        "c-1",
        "queue:replies",
        "order",
    )
    assert full.properties == {"n": 5, "ok": True, "s": "x"}
    assert isinstance(full.properties["n"], Int)
    assert rest == big


def test_send_many_in_a_transaction_waits_for_the_commit(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, client.connect("observer") as observer:
        watch = observer.session()
        tx = conn.session(transacted=True)
        tx.send_many(q, [f"t{i}" for i in range(5)])
        assert watch.browse(q) == []
        tx.commit()
        tx.send_many(q, ["dropped"])
        tx.rollback()
        assert [m.text for m in watch.browse(q)] == [f"t{i}" for i in range(5)]


def test_send_many_is_all_or_none_where_the_destination_is_bounded(client: Client) -> None:
    small = f"{SMALL}.{uuid.uuid4().hex[:10]}"
    with client.connect() as conn, conn.session() as s:
        if client.broker:
            with pytest.raises(DestinationFull):
                s.send_many(small, [f"s{i}" for i in range(SMALL_MAX + 1)])
            assert s.browse(small) == []
        s.send_many(small, [f"s{i}" for i in range(SMALL_MAX)])
        assert [m.text for m in s.browse(small)] == [f"s{i}" for i in range(SMALL_MAX)]


def test_send_many_refuses_a_bad_item_before_anything_is_sent(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        with pytest.raises((InvalidMessage, TypeError)):
            s.send_many(q, [b"fine", 42])  # type: ignore[list-item]
        with pytest.raises(InvalidMessage):
            s.send_many(q, [b"fine", Message(b"x", priority=12)])
        with pytest.raises(InvalidAddress):
            s.send_many("queue:", [b"x"])
        assert s.browse(q) == []


def test_two_phase_transactions_need_a_broker(client: Client) -> None:
    q = client.address()
    xid = f"xid-{uuid.uuid4().hex}"
    with client.connect() as conn, client.connect("coordinator") as coordinator:
        tx = conn.session(transacted=True)
        tx.send(q, "staged")
        if not client.broker:
            with pytest.raises(TransactionError):
                tx.prepare(xid)
            with pytest.raises(TransactionError):
                coordinator.commit_prepared(xid)
            with pytest.raises(TransactionError):
                coordinator.commit_batch("sink", 1, [xid])
            assert coordinator.prepared() == []
            return
        tx.prepare(xid)
        assert xid in coordinator.prepared()
        assert coordinator.session().browse(q) == []
        coordinator.commit_prepared(xid)
        assert [m.text for m in coordinator.session().browse(q)] == ["staged"]
        retried = f"xid-{uuid.uuid4().hex}"
        tx.send(q, "batch")
        tx.prepare(f"{retried}-first")
        assert coordinator.commit_batch(f"sink-{xid}", 1, [f"{retried}-first"])
        tx.send(q, "retry of the batch")
        tx.prepare(retried)
        assert not coordinator.commit_batch(f"sink-{xid}", 1, [retried])  # rolled back
        assert [m.text for m in coordinator.session().browse(q)] == ["staged", "batch"]


# -- the confirm window ------------------------------------------------------------------


def test_the_confirm_window_pipelines_and_flush_confirms(client: Client) -> None:
    q = client.address()
    window = 4
    with client.connect() as conn:
        s = conn.session(confirm_window=window)
        assert s.confirm_window == window
        for i in range(20):
            s.send(q, f"m{i:02d}")
            assert s.unconfirmed <= window
        s.flush()
        assert s.unconfirmed == 0
        s.send(q, "unflushed", persistent=False)  # one-way: never in the window
        assert s.unconfirmed == 0
        s.close()  # awaits what is left
        with conn.session() as check:
            assert drain(check.consumer(q)) == [f"m{i:02d}" for i in range(20)] + ["unflushed"]
        with pytest.raises(ValueError, match="confirm_window"):
            conn.session(confirm_window=-1)


def test_windowed_commits_pipeline_transactions(client: Client) -> None:
    q = client.address()
    with client.connect() as conn:
        tx = conn.session(transacted=True, confirm_window=2)
        for i in range(5):
            tx.send(q, f"t{i}")
            tx.commit()
            assert tx.unconfirmed <= 2
        tx.flush()
        with conn.session() as check:
            assert [m.text for m in check.browse(q)] == [f"t{i}" for i in range(5)]
        tx.close()


# -- management --------------------------------------------------------------------------


def test_a_temporary_queue_carries_replies_and_goes_with_its_connection(client: Client) -> None:
    with client.connect() as conn, conn.session() as s:
        replies = s.temporary_queue()
        assert replies.startswith("queue:")
        s.send(replies, "reply", reply_to=replies)
        reply = receive(s.consumer(replies))
        assert (reply.text, reply.reply_to) == ("reply", replies)


def test_stat_lists_destinations_with_their_depth(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        s.send(q, "x")
        s.send(q, "y")
        depths = {d["address"]: d["depth"] for d in conn.stat()["destinations"]}
        assert depths[q] == 2


def test_what_needs_a_broker_raises_its_documented_error(client: Client) -> None:
    topic, forward = client.address("topic"), client.address()
    with client.connect() as conn, conn.session() as s:
        if client.broker:
            exclusive = s.consumer(client.address(), exclusive=True)
            assert not exclusive.closed
            s.callback(topic, f"cb-{uuid.uuid4().hex[:8]}", forward)
            s.send(topic, "forwarded")
            assert receive(s.consumer(forward)).text == "forwarded"
            return
        with pytest.raises(ConsumerError, match="need a broker"):
            s.consumer(client.address(), exclusive=True)
        with pytest.raises(ChuteError, match="need a broker"):
            s.callback(topic, "cb", forward)


# -- cursors -----------------------------------------------------------------------------


def test_cursors_read_by_sequence_number_without_consuming(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for i in range(5):
            s.send(q, f"c{i}")
        if not client.broker:
            for call in (
                lambda: conn.cursor_open(q),
                lambda: conn.cursor_fetch(q, "c", 0, 5),
                lambda: conn.cursor_read(q, None, 0, 5),
                lambda: conn.cursor_ack(q, "c", 5),
                lambda: conn.cursor_close(q, "c"),
            ):
                with pytest.raises(ChuteError, match="cursors need a broker"):
                    call()
            return
        earliest, head = conn.cursor_open(q)  # a snapshot: nothing held
        assert head - earliest == 5
        pages = list(conn.cursor_read(q, None, earliest, head, page_messages=2))
        assert [len(page) for page in pages] == [2, 2, 1]
        assert [m.text for page in pages for _, m in page] == [f"c{i}" for i in range(5)]
        name = f"cur-{uuid.uuid4().hex[:8]}"
        assert conn.cursor_open(q, name, lease_ms=1000) == (earliest, head)
        next_start, first = conn.cursor_fetch(q, name, earliest, head, max_messages=3)
        assert (next_start, [m.text for _, m in first]) == (earliest + 3, ["c0", "c1", "c2"])
        conn.cursor_ack(q, name, next_start)  # consumes c0..c2
        conn.cursor_close(q, name, delete=True)
        assert [m.text for m in s.browse(q)] == ["c3", "c4"]


def test_a_refused_windowed_send_is_raised_later_with_a_note(client: Client) -> None:
    small = f"{SMALL}.{uuid.uuid4().hex[:10]}"
    sends = SMALL_MAX + 2
    with client.connect() as conn:
        s = conn.session(confirm_window=8)
        for i in range(sends):
            s.send(small, f"s{i}")  # returns before the broker refuses the last two
        errors: list[ChuteError] = []
        while True:
            try:
                s.flush()  # one failure per call
            except DestinationFull as exc:
                errors.append(exc)
            else:
                break
        stored = [m.text for m in s.browse(small)]
        s.close()
    notes = [any("earlier persistent send" in n for n in e.__notes__) for e in errors]
    if client.broker:
        assert (notes, stored) == ([True, True], [f"s{i}" for i in range(SMALL_MAX)])
    else:  # a dropbox destination has no bounds: every send is stored when it returns
        assert (errors, stored) == ([], [f"s{i}" for i in range(sends)])


def test_browsing_a_queue_nothing_made_shows_nothing_and_makes_nothing(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        assert s.browse(q) == []
        assert q not in {d["address"] for d in conn.stat()["destinations"]}


# -- purging and deleting ----------------------------------------------------------------


def test_purge_empties_a_queue_and_delete_removes_it(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session() as s:
        for i in range(3):
            s.send(q, f"p{i}")
        assert conn.purge(q) == 3
        assert s.browse(q) == []
        s.send(q, "kept")
        assert conn.delete(q) == 1
        assert s.browse(q) == []
        assert q not in {d["address"] for d in conn.stat()["destinations"]}
        with pytest.raises(NotFound, match="does not exist"):
            conn.delete(q)
        with pytest.raises(NotFound, match="does not exist"):
            conn.purge(q)
        s.send(q, "again")  # made anew by its next use
        assert [m.text for m in s.browse(q)] == ["again"]


def test_purge_leaves_what_is_in_flight_to_its_consumer(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session(ack="client") as s:
        for i in range(3):
            s.send(q, f"m{i}")
        consumer = s.consumer(q, prefetch=1)
        first = receive(consumer)
        assert first.text == "m0"
        purged = conn.purge(q)  # what the broker pushed ahead (the prefetch) stays too
        first.ack()
        rest = []
        while (message := consumer.receive(timeout=ABSENT)) is not None:
            rest.append(message.text)
            message.ack()
        assert ["m0", *rest] == [f"m{i}" for i in range(3 - purged)]
        assert purged >= 1
        assert s.browse(q) == []


def test_a_consumer_of_a_deleted_queue_is_closed_and_told_why(client: Client) -> None:
    q = client.address()
    with client.connect() as conn, conn.session(ack="client") as s:
        s.send(q, "a")
        consumer = s.consumer(q)
        assert receive(consumer).text == "a"  # in flight: it goes with the queue
        assert client.connect("other").delete(q) == 1
        with pytest.raises(DestinationDeleted, match=f"{q} was deleted"):
            consumer.receive(timeout=WAIT)
        assert consumer.closed
        with pytest.raises(ConsumerError, match="closed"):
            consumer.receive(timeout=ABSENT)


def test_a_topic_is_deleted_with_its_durable_subscriptions_only_when_forced(
    client: Client,
) -> None:
    topic = client.address("topic")
    with client.connect() as conn, conn.session() as s:
        s.consumer(topic, subscription="keep", durable=True).close()
        s.send(topic, "held")
        if not client.broker:
            with pytest.raises(InvalidAddress, match="unsubscribe them"):
                conn.delete(topic, force=True)
            return
        with pytest.raises(ConsumerError, match="durable subscriptions"):
            conn.delete(topic)
        assert conn.delete(topic, force=True) == 1
        again = s.consumer(topic, subscription="keep", durable=True)
        assert again.receive(timeout=ABSENT) is None  # a new subscription: nothing held


def test_the_broker_s_own_queues_are_purged_not_deleted(client: Client) -> None:
    with client.connect() as conn:
        if not client.broker:
            return  # a dropbox has no queues of its own
        with pytest.raises(InvalidAddress, match="purged, not deleted"):
            conn.delete("queue:__sys__deadLetter")
        assert conn.purge("queue:__sys__expired") >= 0
