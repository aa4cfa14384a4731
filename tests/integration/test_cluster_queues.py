"""What queues mean on one node, they mean across the nodes of a cluster: temporary,
login-name and callback queues, expiry, dead letters, bounds, transactions and
priorities, with real etcd and real ``chute serve`` nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.client.blocking import connect
from chute.errors import AccessDenied, NotFound
from chute.message import Message
from tests.integration.conftest import ChuteServer, free_port
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.freeze import freeze, thaw
from tests.integration.test_cluster_nodes import (
    DEADLINE,
    Nodes,
    bodies,
    nothing_more,
    open_consumer,
    send,
    take,
    until,
)

SETTINGS = """
[destinations."queue:few"]
max_deliveries = 2

[destinations."queue:small"]
max_messages = 5
overflow = "reject"
"""

USERS = """
[cluster]
user = "node"
password = "node-pw"

[users.node]
password = "node-pw"
roles = ["peer"]

[users.bob]
password = "bob-pw"
roles = ["app"]

[users.eve]
password = "eve-pw"
roles = ["app"]

[roles.peer]
cluster = ["*"]

[roles.app]
send = ["*", "queue:__user__*"]
consume = ["*"]
browse = ["*"]
create = ["*", "queue:__user__*"]
"""


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    made.config.write_text("[cluster]\nttl = 2\n" + SETTINGS)
    yield made
    made.stop()


def depth(server: ChuteServer, address: str) -> int:
    with connect(server.url) as conn, conn.session() as session:
        return len(session.browse(address))


# -- temporary, login-name and callback queues -----------------------------------------


def test_request_reply_through_a_temporary_queue_on_another_node(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    requester = connect(a.url)
    responder_conn, requests = open_consumer(b, "queue:service")
    with responder_conn, responder_conn.session() as responder:
        rs = requester.session()
        reply_to = rs.temporary_queue()
        replies = rs.consumer(reply_to)
        sent = [f"q{i}" for i in range(20)]
        for body in sent:
            rs.send("queue:service", body, reply_to=reply_to)
        for request in take(requests, len(sent)):
            assert request.reply_to == reply_to
            responder.send(reply_to, f"answer to {request.text}", correlation_id=request.id)
        got = take(replies, len(sent))
        assert sorted(bodies(got)) == sorted(f"answer to {q}" for q in sent)
        nothing_more(replies)
        with pytest.raises(AccessDenied):  # on b it is nobody's to consume
            responder.consumer(reply_to)
        requester.close()

        def refused() -> bool:
            try:
                responder.send(reply_to, "too late")
            except NotFound:
                return True
            return False

        until(refused, "the temporary queue to be gone on b")
        with pytest.raises(NotFound):
            responder.send(reply_to, "too late")


def test_a_reply_sent_before_the_requester_consumes_waits_for_it(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as requester:
        rs = requester.session()
        reply_to = rs.temporary_queue()

        def sent() -> bool:  # once b learned of the queue
            try:
                send(b, reply_to, ["early"])
            except NotFound:
                return False
            return True

        until(sent, "b to take a send to a's temporary queue")
        until(lambda: len(rs.browse(reply_to)) == 1, "the reply on a")
        assert bodies(take(rs.consumer(reply_to), 1)) == ["early"]


def test_a_stomp_requester_gets_replies_a_native_responder_sends_on_another_node(
    nodes: Nodes,
) -> None:
    stomp = pytest.importorskip("stomp")
    stomp_port = free_port()
    a = nodes.start("a", "--stomp-port", str(stomp_port))
    b = nodes.start("b")
    a.wait_for_line("linked to node b", timeout=DEADLINE)
    responder_conn, requests = open_consumer(b, "queue:service")
    listener = stomp.listener.TestListener()
    conn = stomp.Connection([("127.0.0.1", stomp_port)])
    conn.set_listener("", listener)
    conn.connect(wait=True)
    try:
        with responder_conn, responder_conn.session() as responder:
            conn.subscribe(destination="/temp-queue/replies", id="1", ack="auto")
            for i in range(10):
                conn.send("/queue/service", f"q{i}", headers={"reply-to": "/temp-queue/replies"})
            for request in take(requests, 10):
                assert request.reply_to is not None
                responder.send(request.reply_to, f"answer to {request.text}")
            until(lambda: len(listener.message_list) >= 10, "the replies on a")
            got = sorted(body for _headers, body in listener.message_list)
            assert got == sorted(f"answer to q{i}" for i in range(10))
    finally:
        conn.disconnect()


def test_a_login_name_queue_consumed_on_one_node_gets_what_another_sends(
    tmp_path: Path, etcd: EtcdProcess
) -> None:
    nodes = Nodes(tmp_path, etcd)
    nodes.config.write_text("[cluster]\nttl = 2\n" + USERS.replace("[cluster]\n", ""))
    try:
        a, b = nodes.start_linked("a", "b")
        with (
            connect(a.url, login="bob", passcode="bob-pw") as bob,
            connect(b.url, login="eve", passcode="eve-pw") as eve,
            eve.session() as es,
        ):
            inbox = bob.session(ack="individual").consumer("queue:__user__.bob")
            sent = [f"m{i}" for i in range(10)]

            def delivered() -> bool:
                es.send("queue:__user__.bob", "probe")
                got = inbox.receive(timeout=0.2)
                if got is None:
                    return False
                got.ack()
                return True

            until(delivered, "a message from b to bob's queue on a")
            while (extra := inbox.receive(timeout=0.5)) is not None:  # probes sent meanwhile
                extra.ack()
            for body in sent:
                es.send("queue:__user__.bob", body)
            assert bodies(take(inbox, len(sent))) == sent
            nothing_more(inbox)
            with pytest.raises(AccessDenied):
                es.consumer("queue:__user__.bob")
    finally:
        nodes.stop()


def test_a_callback_on_one_node_forwards_what_another_publishes(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as conn, conn.session() as session:
        session.callback("topic:news", "cb", "queue:inbox")
        inbox = conn.session(ack="individual").consumer("queue:inbox")

        def forwarded() -> bool:
            send(b, "topic:news", ["probe"])
            got = inbox.receive(timeout=0.2)
            if got is None:
                return False
            got.ack()
            return True

        until(forwarded, "a publication on b forwarded by a's callback")
        while (extra := inbox.receive(timeout=0.5)) is not None:
            extra.ack()
        send(b, "topic:news", ["n1", "n2", "n3"])
        assert bodies(take(inbox, 3)) == ["n1", "n2", "n3"]
        nothing_more(inbox)


# -- expiry, dead letters, bounds, transactions, priorities ----------------------------


def test_an_expired_message_is_not_handed_over_and_one_handed_over_keeps_its_expiry(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as conn, conn.session() as session:
        session.send("queue:work", "short", ttl=100)
        session.send("queue:work", "long", ttl=600_000)
    expiration = {m.text: m.expiration for m in _browse(a, "queue:work")}
    until(lambda: depth(a, "queue:work") == 1, "the short one to expire on a")
    conn_b, consumer = open_consumer(b, "queue:work")
    with conn_b:
        got = take(consumer, 1)
        assert bodies(got) == ["long"]
        assert got[0].expiration == expiration["long"]
        nothing_more(consumer)
    assert [m.text for m in _browse(a, "queue:__sys__expired")] == ["short"]
    assert _browse(b, "queue:__sys__expired") == []


def _browse(server: ChuteServer, address: str) -> list[Message]:
    with connect(server.url) as conn, conn.session() as session:
        return session.browse(address)


def test_a_message_redelivered_too_often_is_dead_lettered_once_on_the_consuming_node(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    conn_b, consumer = open_consumer(b, "queue:few")
    with conn_b:
        send(a, "queue:few", ["poison"])
        for _ in range(2):  # max_deliveries = 2
            item = consumer.receive(timeout=DEADLINE)
            assert item is not None
            item.nack(requeue=True)
        nothing_more(consumer)
    until(
        lambda: [m.text for m in _browse(b, "queue:__sys__deadLetter")] == ["poison"],
        "the message in b's dead letters",
    )
    assert _browse(a, "queue:__sys__deadLetter") == []
    assert depth(a, "queue:few") == depth(b, "queue:few") == 0


def test_a_full_queue_on_the_consuming_node_refuses_and_the_sender_holds_on(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    conn_b, consumer = open_consumer(b, "queue:small", prefetch=2)
    with conn_b:
        sent = [f"m{i}" for i in range(15)]
        send(a, "queue:small", sent[:5])  # max_messages = 5 on each node
        until(lambda: depth(a, "queue:small") == 0, "a to hand over what b has room for")
        assert depth(b, "queue:small") == 5  # full: 2 out to its consumer, 3 waiting
        send(a, "queue:small", sent[5:10])  # b refuses them: a keeps them
        got = take(consumer, 10)  # room on b: b asks again, a hands them over
        until(lambda: depth(a, "queue:small") == 0, "a to have handed everything over")
        send(a, "queue:small", sent[10:15])
        got += take(consumer, 5)
        assert sorted(bodies(got)) == sorted(sent)
        nothing_more(consumer)


def test_a_transaction_sends_to_another_node_only_once_it_commits(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    conn_b, consumer = open_consumer(b, "queue:work")
    with conn_b, connect(a.url) as conn, conn.session(transacted=True) as tx:
        for i in range(5):
            tx.send("queue:work", f"rolled back {i}")
        nothing_more(consumer)
        tx.rollback()
        for i in range(5):
            tx.send("queue:work", f"t{i}")
        nothing_more(consumer)
        tx.commit()
        assert bodies(take(consumer, 5)) == [f"t{i}" for i in range(5)]
        nothing_more(consumer)


def test_higher_priority_first_across_the_link(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as conn, conn.session() as session:
        for i in range(10):
            session.send("queue:work", f"low{i}", priority=1)
        for i in range(10):
            session.send("queue:work", f"high{i}", priority=8)
    conn_b, consumer = open_consumer(b, "queue:work", prefetch=1)
    with conn_b:
        got = bodies(take(consumer, 20))
        assert got == [f"high{i}" for i in range(10)] + [f"low{i}" for i in range(10)]


# -- flow control ------------------------------------------------------------------------


def test_a_frozen_receiver_gets_no_more_than_the_links_window(
    tmp_path: Path, etcd: EtcdProcess
) -> None:
    nodes = Nodes(tmp_path, etcd)
    nodes.config.write_text("[cluster]\nttl = 60\n")  # b stays a member while frozen
    queues = [f"queue:w{i}" for i in range(8)]
    try:
        a, b = nodes.start_linked("a", "b")
        with connect(b.url) as conn_b:
            session = conn_b.session(ack="individual")
            consumers = [session.consumer(q, prefetch=1000) for q in queues]

            def known() -> bool:  # a hands over to b for every queue
                for q, consumer in zip(queues, consumers, strict=True):
                    send(a, q, ["probe"])
                    got = consumer.receive(timeout=0.2)
                    if got is None:
                        return False
                    got.ack()
                return True

            until(known, "a to know b's consumers")
            for consumer in consumers:
                while (extra := consumer.receive(timeout=0.2)) is not None:
                    extra.ack()
            freeze(b.process)
            try:
                with connect(a.url) as conn_a, conn_a.session() as producer:
                    for q in queues:
                        producer.send_many(q, [f"{q}/{i}" for i in range(300)])
                    producer.flush()

                    def on_a() -> tuple[int, int]:
                        rows = [d for d in conn_a.stat()["destinations"] if d["address"] in queues]
                        return sum(d["ready"] for d in rows), sum(d["inflight"] for d in rows)

                    until(lambda: sum(on_a()) == 2400, "every message on a")
                    until(lambda: on_a()[1] == 1024, "the link's window in flight")
                    assert on_a() == (2400 - 1024, 1024)
            finally:
                thaw(b.process)
            got = []
            for consumer in consumers:
                got += take(consumer, 300)
            assert sorted(bodies(got)) == sorted(f"{q}/{i}" for q in queues for i in range(300))
            for consumer in consumers:
                nothing_more(consumer, within=0.2)
    finally:
        nodes.stop()
