"""A live broker: typed properties reach stomp.py as plain values, and STOMP selectors read
JMSMessageID, JMSReplyTo and JMSXDeliveryCount as DropboxMQ's consumer does, for native
messages and for DropboxMQ files the broker imports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute.dropbox.layout import init_queue
from chute.message import Byte, Float, Int, Short

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import Client

# What DropboxMQ's producer writes: the id, then typed properties; the second also a
# reply-to queue, the third a reply-to topic and a delivery count (a rolled-back message
# its consumer put back into target/, claim prefix and all).
TYPED = "4.1700000000000000-1.T.....yY=-128&hH=-20000&iI=0&lL=10000000070&fF=1%2E1&bB=true"
REPLY_QUEUE = "4.1700000000001000-2.T...Qreplies..kS=a"
REPLY_TOPIC = "javaC~4.1700000000002000-3.T...Tnews%2Eeu..kS=b&JMSXDeliveryCountI=1"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChuteServer]:
    mq = tmp_path / "mq"
    init_queue(mq, "imports")
    config = tmp_path / "chute.toml"
    config.write_text(
        f'[[dropbox]]\nroot = "{mq}"\ndestinations = ["imports"]\npoll_interval_ms = 50\n'
    )
    stomp_port = free_port()
    srv = start_server(tmp_path, "--config", str(config), "--stomp-port", str(stomp_port))
    srv.stomp_port = stomp_port  # type: ignore[attr-defined]
    srv.mq = mq  # type: ignore[attr-defined]
    yield srv
    srv.stop()
    assert "Traceback" not in srv.output


@pytest.fixture
def client(server: ChuteServer) -> Iterator[Client]:
    c = Client(server.stomp_port)  # type: ignore[attr-defined]
    yield c
    c.close()


def drop(root: Path, queue: str, name: str) -> None:
    """A DropboxMQ producer: write the file in working/, then rename it into target/."""
    layout = init_queue(root, queue)
    (layout.working / name).write_text(name[:20])
    os.rename(layout.working / name, layout.target / name)


def test_native_narrow_integers_reach_stomp_as_plain_values(
    server: ChuteServer, client: Client
) -> None:
    client.conn.subscribe("/queue/typed", id="s", ack="auto")
    with chute.connect(server.url) as conn, conn.session() as s:
        s.send(
            "queue:typed",
            "x",
            properties={
                "y": Byte(-128),
                "h": Short(-20000),
                "i": Int(0),
                "l": 10000000070,
                "f": Float(1.1),
                "d": 0.1,
                "b": False,
            },
        )
    h = client.message().headers
    got = {name: h[name] for name in ("y", "h", "i", "l", "f", "d", "b")}
    assert got == {
        "y": "-128",
        "h": "-20000",
        "i": "0",
        "l": "10000000070",
        "f": "1.1",
        "d": "0.1",
        "b": "false",
    }


def test_an_imported_dropboxmq_message_reaches_stomp_with_plain_values(
    server: ChuteServer, client: Client
) -> None:
    client.conn.subscribe("/queue/imports", id="s", ack="auto")
    drop(server.mq, "imports", TYPED)  # type: ignore[attr-defined]
    frame = client.message()
    h = frame.headers
    assert h["message-id"] == "ID:1700000000000000-1"
    got = {name: h[name] for name in ("y", "h", "i", "l", "f", "b")}
    assert got == {
        "y": "-128",
        "h": "-20000",
        "i": "0",
        "l": "10000000070",
        "f": "1.1",
        "b": "true",
    }


@pytest.mark.parametrize(
    ("selector", "ids"),
    [
        ("JMSMessageID LIKE 'ID:%'", {"ID:1700000000001000-2", "ID:1700000000002000-3"}),
        ("JMSMessageID = 'ID:1700000000002000-3'", {"ID:1700000000002000-3"}),
        ("JMSReplyTo = 'replies'", {"ID:1700000000001000-2"}),
        ("JMSReplyTo = 'news.eu'", {"ID:1700000000002000-3"}),
        ("JMSXDeliveryCount IS NULL", {"ID:1700000000001000-2"}),
        ("JMSXDeliveryCount IS NOT NULL", {"ID:1700000000002000-3"}),
    ],
)
def test_stomp_selectors_over_imported_dropboxmq_messages(
    server: ChuteServer, client: Client, selector: str, ids: set[str]
) -> None:
    mq: Path = server.mq  # type: ignore[attr-defined]
    client.conn.subscribe("/queue/imports", id="picky", ack="auto", headers={"selector": selector})
    for name in (REPLY_QUEUE, REPLY_TOPIC):
        drop(mq, "imports", name)
    got = {client.message().headers["message-id"] for _ in ids}
    assert got == ids
    # what the selector left behind is still there, for a consumer without one
    client.conn.unsubscribe("picky")
    client.conn.subscribe("/queue/imports", id="rest", ack="auto")
    everything = {"ID:1700000000001000-2", "ID:1700000000002000-3"}
    rest = {client.message().headers["message-id"] for _ in everything - ids}
    assert rest == everything - ids
    client.no_message()


def test_a_native_message_s_jms_message_id_has_the_prefix(
    server: ChuteServer, client: Client
) -> None:
    with chute.connect(server.url) as conn, conn.session() as s:
        s.send("queue:native", "one", id="order-1", reply_to="topic:answers")
        s.send("queue:native", "two", id="order-2")
    client.conn.subscribe(
        "/queue/native",
        id="s",
        ack="auto",
        headers={"selector": "JMSMessageID = 'ID:order-1' AND JMSReplyTo = 'answers'"},
    )
    frame = client.message()
    assert frame.headers["message-id"] == "order-1"  # the id itself is what chute stores
    client.no_message()
