"""Names as long as the consumers that claim them allow: the room a claim needs is the
claim prefix of those consumers (a topic's subscription directories name them; an
export's queue readers are configured), not a fixed guess, and no room is kept for a
delivery count, as DropboxMQ 1.2 keeps none: its consumer reads every name it can
claim, 200-230-byte realistic names included."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

import chute
from chute.client.received import Received
from chute.dropbox.layout import QueueLayout, init_queue, init_subscription, init_topic
from chute.dropbox.queue import QueueConsumer
from chute.dropbox.transcoder import decode_filename, encode_filename
from chute.errors import InvalidMessage
from chute.message import Byte, Float, Int, Message, Short
from tests.integration.dropbox_bridge import (
    WAIT,
    count,
    export_mount,
    import_mount,
    serve,
    wait_until,
)

READER = "javaC"  # a DropboxMQ consumer's client id: its claim prefix is "javaC~", 6 bytes
LONGEST = 255 - len(READER + "~")
SIZES = range(200, LONGEST + 1)  # 200-249: every one fits once javaC claims it
PROPERTIES = {
    "b": True,
    "r": "base",
    "s": "s1",
    "d": 2.5,
    "f": Float(1.25),
    "h": Short(-19630),
    "y": Byte(-118),
    "i": Int(10000030),
    "l": 10000000070,
    "n": Int(10),
}


def sized(size: int) -> Message:
    """A realistic message (ten typed properties, a reply-to, a type) whose DropboxMQ
    name is ``size`` bytes; its body says the size."""
    base = Message.create(
        f"{size}",
        id=f"{size:04d}" + "0" * 28,
        priority=4,
        reply_to="queue:replies",
        type="Order.v1",
        properties=PROPERTIES,
    )
    short = len(encode_filename(base.replace(correlation_id="c"), claim_room=0))
    message = base.replace(correlation_id="c" * (1 + size - short))
    assert len(encode_filename(message, claim_room=0)) == size
    return message


def send_sized(session: chute.Session, address: str, size: int) -> None:
    """Send :func:`sized` ``size`` through any client session."""
    m = sized(size)
    session.send(
        address,
        m.body,
        id=m.id,
        reply_to=m.reply_to,
        type=m.type,
        correlation_id=m.correlation_id,
        properties=m.properties,
    )


def send_all(url: str, address: str, sizes: Sequence[int]) -> None:
    with chute.connect(url) as conn, conn.session() as session:
        for size in sizes:
            send_sized(session, address, size)


def read_as(client: str, layout: QueueLayout, expected: int) -> list[int]:
    """What a consumer ``client`` claims and reads from ``layout`` (acking each): the
    sizes of the names, as their bodies say."""
    consumer = QueueConsumer(layout, "", client)
    got: list[int] = []
    while (delivery := consumer.receive()) is not None:
        assert len(delivery.decoded.name) == int(delivery.message.body)
        got.append(int(delivery.message.body))
        consumer.ack(delivery)
    assert count(layout.error) == 0
    assert len(got) == expected
    return sorted(got)


def dead_letters(url: str, expected: int) -> list[Received]:
    with chute.connect(url) as conn, conn.session() as session:
        dead = session.consumer("queue:__sys__deadLetter")
        got: list[Received] = []
        while len(got) < expected and (m := dead.receive(timeout=WAIT)) is not None:
            got.append(m)
        assert dead.receive(timeout=0.2) is None
        return got


def test_a_topic_export_leaves_the_room_its_subscribers_claim_with(tmp_path: Path) -> None:
    out = tmp_path / "out"
    subscription = init_subscription(init_topic(out, "orders"), "audit", READER)
    server = serve(tmp_path, export_mount(out, "topic:orders"))
    try:
        send_all(server.url, "topic:orders", [*SIZES, LONGEST + 1])
        wait_until(lambda: count(subscription.target) == len(SIZES), "every name that fits")
        [refused] = dead_letters(server.url, 1)  # one byte too long for javaC~
        assert refused.text == str(LONGEST + 1)
    finally:
        server.stop()
    assert read_as(READER, subscription, len(SIZES)) == list(SIZES)
    assert "6-byte client prefix it must fit 255 bytes, so 249 at most" in server.output


def test_a_queue_export_leaves_the_room_its_configured_consumers_claim_with(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    server = serve(tmp_path, export_mount(out, "queue:results", consumers=[READER, "app-1"]))
    layout = init_queue(out, "results")
    try:
        send_all(server.url, "results", list(SIZES))
        wait_until(lambda: count(layout.target) == len(SIZES), "every name exported")
    finally:
        server.stop()
    assert read_as(READER, layout, len(SIZES)) == list(SIZES)


def test_a_queue_export_without_consumers_leaves_room_for_generated_client_ids(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    server = serve(tmp_path, export_mount(out, "queue:results"))
    layout = init_queue(out, "results")
    generated = "1795419216341000-0462377156"  # DropboxMQ's client id when none is set
    fits = range(200, 255 - len(generated + "~") + 1)  # 200-227, not 204 as before
    try:
        send_all(server.url, "results", [*fits, fits[-1] + 1])
        wait_until(lambda: count(layout.target) == len(fits), "every name that fits")
        assert [m.text for m in dead_letters(server.url, 1)] == [str(fits[-1] + 1)]
    finally:
        server.stop()
    assert read_as(generated, layout, len(fits)) == list(fits)


def test_a_dropboxmq_relay_through_the_broker_carries_every_name_dropboxmq_reads(
    tmp_path: Path,
) -> None:
    inbound, outbound = tmp_path / "in", tmp_path / "out"
    source = init_queue(inbound, "relay")
    sizes = range(200, 255 - len("chute-bridge~") + 1)  # what the bridge's import claims
    for n in sizes:  # as DropboxMQ's producer writes them: working/, then target/
        name = encode_filename(sized(n), claim_room=0)
        (source.working / name).write_text(str(n))
        os.rename(source.working / name, source.target / name)
    server = serve(
        tmp_path,
        import_mount(inbound, "relay"),
        export_mount(outbound, "queue:relay", consumers=[READER]),
    )
    sink = init_queue(outbound, "relay")
    try:
        wait_until(lambda: count(sink.target) == len(sizes), "every file relayed")
        # the import files a source away once its message is stored: that may come
        # after the export wrote it out
        wait_until(lambda: count(source.processed) == len(sizes), "every source filed away")
        assert count(source.error) == 0
    finally:
        server.stop()
    relayed = sorted(decode_filename(n).id for n in os.listdir(sink.target))
    assert relayed == sorted("ID:" + sized(n).id for n in sizes)  # the same messages
    assert read_as(READER, sink, len(sizes)) == list(sizes)


def test_a_serverless_topic_publish_leaves_the_room_its_subscribers_claim_with(
    tmp_path: Path,
) -> None:
    audit = init_subscription(init_topic(tmp_path, "orders"), "audit", READER)
    send_all(f"dropbox://{tmp_path}?client_id=publisher-with-a-long-id", "topic:orders", SIZES)
    assert read_as(READER, audit, len(SIZES)) == list(SIZES)


def test_a_serverless_queue_send_leaves_the_room_its_named_consumers_claim_with(
    tmp_path: Path,
) -> None:
    producer = "a-producer-whose-client-id-is-long-enough"
    url = f"dropbox://{tmp_path}?client_id={producer}"
    send_all(f"{url}&consumers={READER},app-1", "orders", list(SIZES))
    assert read_as(READER, init_queue(tmp_path, "orders"), len(SIZES)) == list(SIZES)
    with chute.connect(url) as conn, conn.session() as session:  # no consumers: its own id
        send_sized(session, "orders", 255 - len(producer + "~"))
        with pytest.raises(InvalidMessage, match="42-byte client prefix"):
            send_sized(session, "orders", 255 - len(producer + "~") + 1)
