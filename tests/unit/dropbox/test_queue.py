"""Serverless queue dropboxes with real files: produce, claim, expire, ack, recover."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from chute.dropbox.maintenance import recover_client
from chute.dropbox.names import split_claim_name
from chute.dropbox.queue import ConsumerOptions, Delivery, QueueConsumer, QueueProducer
from chute.errors import InvalidAddress, InvalidMessage
from chute.message import BodyKind, Message, now_ms

REPO = Path(__file__).resolve().parents[3]
SEED_EXAMPLE_1 = (
    "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"
)


def text(body: str, **fields: object) -> Message:
    return Message(body.encode(), kind=BodyKind.TEXT, **fields)  # type: ignore[arg-type]


def drain(consumer: QueueConsumer) -> list[Delivery]:
    out: list[Delivery] = []
    while (d := consumer.receive()) is not None:
        out.append(d)
    return out


def bodies(deliveries: list[Delivery]) -> list[bytes]:
    return [d.message.body for d in deliveries]


def names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


# -- produce and consume ------------------------------------------------------------------


def test_a_produced_message_is_consumed_with_its_headers(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "orders")
    name = producer.send(
        text(
            "hello",
            priority=7,
            correlation_id="c 1",
            reply_to="queue:replies",
            type="Order",
            properties={"n": 3, "who": "me"},
        )
    )
    layout = producer.layout
    assert names(layout.target) == [name]
    assert names(layout.working) == []
    delivery = QueueConsumer(tmp_path, "orders", "c1").receive()
    assert delivery is not None
    m = delivery.message
    assert (m.body, m.text, m.kind, m.priority) == (b"hello", "hello", BodyKind.TEXT, 7)
    assert (m.correlation_id, m.reply_to, m.type) == ("c 1", "queue:replies", "Order")
    assert m.properties == {"n": 3, "who": "me"}
    assert (m.redelivered, m.delivery_count, m.persistent) == (False, 0, True)
    assert 0 < m.timestamp <= now_ms()
    assert delivery.path == layout.processing / f"c1~{name}"
    assert names(layout.target) == []


def test_order_is_priority_then_time_then_sequence(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    for i, priority in enumerate([4, 9, 0, 4, 9, 4]):
        producer.send(text(f"{priority}-{i}", priority=priority))
    consumer = QueueConsumer(tmp_path, "q", "c")
    got = bodies(drain(consumer))
    assert got == [b"9-1", b"9-4", b"4-0", b"4-3", b"4-5", b"0-2"]


def test_time_orders_before_the_filename(tmp_path: Path) -> None:
    layout = QueueProducer(tmp_path, "q").layout
    # by name "4.1000000..." comes first; by time (999 ms < 1000 ms) "4.999000..." does
    (layout.target / "4.1000000-a.T").write_bytes(b"later")
    (layout.target / "4.999000-z.T").write_bytes(b"earlier")
    (layout.target / "4.999001-a.T").write_bytes(b"earlier, next sequence")
    got = bodies(drain(QueueConsumer(tmp_path, "q", "c")))
    assert got == [b"earlier", b"earlier, next sequence", b"later"]


def test_a_message_with_its_own_id_keeps_it(tmp_path: Path) -> None:
    QueueProducer(tmp_path, "q").send(Message.create("x", id="ID:order/17 ~ok"))
    delivery = QueueConsumer(tmp_path, "q", "c").receive()
    assert delivery is not None
    assert delivery.message.id == "ID:order/17 ~ok"


def test_producer_fsyncs_the_file_and_the_directory(tmp_path: Path) -> None:
    synced: list[int] = []
    producer = QueueProducer(tmp_path, "q", fsync=synced.append)
    producer.send(text("a"))
    assert len(synced) == 2
    QueueProducer(tmp_path, "q", durable=False, fsync=synced.append).send(text("b"))
    assert len(synced) == 2


def test_a_failed_fsync_leaves_nothing_behind(tmp_path: Path) -> None:
    def fail(fd: int) -> None:
        raise OSError(5, "EIO")

    producer = QueueProducer(tmp_path, "q", fsync=fail)
    with pytest.raises(OSError, match="EIO"):
        producer.send(text("a"))
    assert names(producer.layout.target) == []
    assert names(producer.layout.working) == []


def test_a_message_that_cannot_be_named_is_refused(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    with pytest.raises(InvalidMessage):
        producer.send(text("a", properties={"p": "x" * 300}))
    assert names(producer.layout.working) == []


def test_bad_destinations_and_client_ids_are_refused(tmp_path: Path) -> None:
    for bad in ("..", "../x", "a/b", "/etc"):
        with pytest.raises(InvalidAddress):
            QueueProducer(tmp_path, bad)
        with pytest.raises(InvalidAddress):
            QueueConsumer(tmp_path, bad, "c")
        with pytest.raises(InvalidAddress):
            recover_client(tmp_path, bad, "c")
    with pytest.raises(InvalidAddress):
        QueueConsumer(tmp_path, "q", "")
    with pytest.raises(InvalidAddress):
        QueueConsumer(tmp_path, "q", "c" * 49)
    assert list(tmp_path.iterdir()) == []


# -- claim races ----------------------------------------------------------------------------


def test_two_consumers_racing_in_one_process_each_get_different_messages(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    for i in range(3):
        producer.send(text(str(i)))
    a = QueueConsumer(tmp_path, "q", "a")
    b = QueueConsumer(tmp_path, "q", "b")
    first = a.receive()  # a has listed all three and claimed "0"
    second = b.receive()  # b lists "1" and "2" and claims "1": a's listing is stale
    third = a.receive()  # a's rename of "1" fails: it moves on to "2"
    assert first is not None
    assert second is not None
    assert third is not None
    assert [d.message.body for d in (first, second, third)] == [b"0", b"1", b"2"]
    assert a.receive() is None
    assert b.receive() is None


def test_a_file_vanishing_between_listing_and_claim_is_not_an_error(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    gone, kept = producer.send(text("gone")), producer.send(text("kept"))
    consumer = QueueConsumer(tmp_path, "q", "c")
    consumer._scan()  # list target/ now ...
    (producer.layout.target / gone).unlink()  # ... then the file vanishes
    delivery = consumer.receive()
    assert delivery is not None
    assert delivery.decoded.name == kept
    assert consumer.receive() is None


def test_a_new_higher_priority_message_waits_for_the_scan_timeout(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    producer.send(text("low 1", priority=1))
    producer.send(text("low 2", priority=1))
    cached = QueueConsumer(tmp_path, "q", "c1")
    rescanning = QueueConsumer(
        tmp_path, "q", "c2", options=ConsumerOptions(target_scan_timeout_ms=0)
    )
    d = cached.receive()
    assert d is not None
    assert d.message.body == b"low 1"
    producer.send(text("high", priority=9))
    d = rescanning.receive()  # scans every time: sees "high" at once
    assert d is not None
    assert d.message.body == b"high"
    producer.send(text("high 2", priority=9))
    d = cached.receive()  # works through its listing first, as DropboxMQ does
    assert d is not None
    assert d.message.body == b"low 2"
    assert bodies(drain(cached)) == [b"high 2"]


# -- expiry, ack, recover -----------------------------------------------------------------


def test_an_expired_message_goes_to_expired(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    old = producer.send(text("old", expiration=now_ms() - 1))
    producer.send(text("fresh", expiration=now_ms() + 3_600_000))
    consumer = QueueConsumer(tmp_path, "q", "c")
    assert bodies(drain(consumer)) == [b"fresh"]
    assert names(producer.layout.expired) == [f"c~{old}"]


def test_expired_messages_can_be_deleted(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    producer.send(text("old", expiration=1))
    consumer = QueueConsumer(tmp_path, "q", "c", options=ConsumerOptions(delete_expired=True))
    assert consumer.receive() is None
    assert names(producer.layout.expired) == []
    assert names(producer.layout.processing) == []


def test_ack_moves_to_processed_with_the_delivery_count(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    name = producer.send(text("a"))
    consumer = QueueConsumer(tmp_path, "q", "c 1")
    delivery = consumer.receive()
    assert delivery is not None
    consumer.ack(delivery)
    assert names(producer.layout.processing) == []
    assert names(producer.layout.processed) == [f"c+1~{name}.....JMSXDeliveryCountI=1"]
    with pytest.raises(FileNotFoundError):
        consumer.ack(delivery)


def test_ack_can_delete(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    producer.send(text("a"))
    consumer = QueueConsumer(tmp_path, "q", "c", options=ConsumerOptions(delete_processed=True))
    delivery = consumer.receive()
    assert delivery is not None
    consumer.ack(delivery)
    layout = producer.layout
    assert names(layout.processed) == names(layout.processing) == names(layout.target) == []


def test_recover_with_the_default_limit_goes_to_error(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    name = producer.send(text("a"))
    consumer = QueueConsumer(tmp_path, "q", "c")
    delivery = consumer.receive()
    assert delivery is not None
    path = consumer.recover(delivery)
    assert path.parent == producer.layout.error
    assert names(producer.layout.error) == [f"c~{name}.....JMSXDeliveryCountI=1"]
    assert consumer.receive() is None


def test_recover_counts_deliveries_then_goes_to_error(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    producer.send(text("a", properties={"k": "v"}))
    consumer = QueueConsumer(tmp_path, "q", "c", options=ConsumerOptions(redelivery_attempts=2))
    seen: list[tuple[int, bool]] = []
    while (delivery := consumer.receive()) is not None:
        seen.append((delivery.message.delivery_count, delivery.message.redelivered))
        assert delivery.message.properties == {"k": "v"}
        consumer.recover(delivery)
    assert seen == [(0, False), (1, True), (2, True)]
    (left,) = names(producer.layout.error)
    assert left.endswith(".....kS=v&JMSXDeliveryCountI=3")
    assert names(producer.layout.target) == names(producer.layout.processing) == []


# -- a killed consumer --------------------------------------------------------------------


def test_recover_client_brings_back_only_that_clients_claims(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    for i in range(4):
        producer.send(text(str(i)))
    dead = QueueConsumer(tmp_path, "q", "dead one")
    alive = QueueConsumer(tmp_path, "q", "alive")
    claimed = [dead.receive(), dead.receive(), dead.receive()]
    kept = alive.receive()
    assert kept is not None
    assert all(claimed)
    restored = recover_client(tmp_path, "q", "dead one")
    assert len(restored) == 3
    assert names(producer.layout.processing) == [kept.path.name]
    got = drain(QueueConsumer(tmp_path, "q", "next"))
    assert sorted(bodies(got)) == [b"0", b"1", b"2"]
    assert all(d.message.redelivered and d.message.delivery_count == 1 for d in got)
    assert recover_client(tmp_path, "q", "dead one") == []


CONSUMER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from chute.dropbox.queue import QueueConsumer
    root, client, out, done = sys.argv[1:5]
    limit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    consumer = QueueConsumer(root, "q", client, options=None)
    got = 0
    with open(out, "w") as f:
        while True:
            finished = Path(done).exists()
            d = consumer.receive()
            if d is None:
                if finished:
                    break
                time.sleep(0.001)  # the polling interval of this worker
                continue
            got += 1
            if limit is not None:  # claim, never ack, then wait to be killed
                if got == limit:
                    print("claimed", flush=True)
                    time.sleep(600)
                continue
            f.write(d.message.body.decode() + "\\n")
            consumer.ack(d)
    """
)

PRODUCER = textwrap.dedent(
    """
    import sys
    from chute.dropbox.queue import QueueProducer
    from chute.message import BodyKind, Message
    root, count = sys.argv[1], int(sys.argv[2])
    producer = QueueProducer(root, "q")
    for i in range(count):
        producer.send(Message(str(i).encode(), kind=BodyKind.TEXT, priority=i % 10))
    """
)


def python(script: str, *args: object, stdout: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", script, *map(str, args)]
    return subprocess.Popen(argv, env=env, text=True, stdout=stdout)


@pytest.mark.slow
def test_two_consumer_processes_and_a_producer_deliver_each_message_once(
    tmp_path: Path,
) -> None:
    count = 2000
    root, done = tmp_path / "root", tmp_path / "done"
    outs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    consumers = [python(CONSUMER, root, f"c{i}", out, done) for i, out in enumerate(outs)]
    producer = python(PRODUCER, root, count)
    assert producer.wait(timeout=50) == 0
    done.touch()
    for consumer in consumers:
        assert consumer.wait(timeout=50) == 0
    got = Counter(line for out in outs for line in out.read_text().splitlines())
    assert got == Counter(str(i) for i in range(count))  # each exactly once
    incoming = root / "q" / "incoming"
    assert names(incoming / "processing") == names(incoming / "target") == []
    assert names(incoming / "working") == []
    assert len(names(incoming / "processed")) == count
    assert all(len(out.read_text()) > 0 for out in outs)  # both took part


def test_a_killed_consumer_process_is_recovered(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "q")
    for i in range(5):
        producer.send(text(str(i)))
    victim = python(
        CONSUMER, tmp_path, "victim", tmp_path / "out", tmp_path / "done", 3, stdout=subprocess.PIPE
    )
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline() == "claimed\n"
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
    processing = producer.layout.processing
    assert len(names(processing)) == 3
    assert {split_claim_name(n)[0] for n in names(processing)} == {"victim"}
    assert len(recover_client(tmp_path, "q", "victim")) == 3
    assert names(processing) == []
    got = drain(QueueConsumer(tmp_path, "q", "heir"))
    assert sorted(bodies(got)) == [b"0", b"1", b"2", b"3", b"4"]
    assert sum(d.message.redelivered for d in got) == 3


# -- files from elsewhere -----------------------------------------------------------------


SHELL_PRODUCER = 'cd "$1" && printf %s "$3" > working/"$2" && mv working/"$2" target/'


def shell_produce(base: Path, name: str, body: str) -> None:
    """A producer that knows only the protocol: write in working/, mv to target/."""
    subprocess.run(["sh", "-c", SHELL_PRODUCER, "sh", str(base), name, body], check=True)


def test_a_shell_producer_is_read_as_dropboxmq_reads_it(tmp_path: Path) -> None:
    layout = QueueProducer(tmp_path, "q").layout
    name = "4.1140429201295000-9262574723.T..corr1283.TestQueue1.XYZType.prop1S=hello"
    shell_produce(layout.base, name, "hi there")
    shell_produce(layout.base, SEED_EXAMPLE_1, "x")  # the seed's example: expired since 2006
    consumer = QueueConsumer(tmp_path, "q", "c")
    delivery = consumer.receive()
    assert delivery is not None
    m = delivery.message
    assert (m.text, m.kind, m.id, m.priority) == (
        "hi there",
        BodyKind.TEXT,
        "ID:1140429201295000-9262574723",
        4,
    )
    assert (m.timestamp, m.correlation_id, m.reply_to, m.type) == (
        1140429201295,
        "corr1283",
        "topic:estQueue1",
        "XYZType",
    )
    assert m.properties == {"prop1": "hello"}
    assert consumer.receive() is None
    assert names(layout.expired) == [f"c~{SEED_EXAMPLE_1}"]


def test_a_foreign_file_is_consumed_with_dropboxmq_defaults(tmp_path: Path) -> None:
    layout = QueueProducer(tmp_path, "q").layout
    (layout.target / "report 2024.csv").write_bytes(b"a,b\n")
    delivery = QueueConsumer(tmp_path, "q", "c").receive()
    assert delivery is not None
    m = delivery.message
    assert (m.id, m.priority, m.expiration, m.kind, m.body) == (
        "ID:report 2024.csv",
        4,
        0,
        BodyKind.TEXT,
        b"a,b\n",
    )


def test_unreadable_files_go_to_error_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    layout = QueueProducer(tmp_path, "q").layout
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not deliver")
    (layout.target / "4.1000000-link.T").symlink_to(secret)
    os.mkfifo(layout.target / "4.1000001-fifo.T")
    (layout.target / "a directory").mkdir()
    (layout.target / "4.1000002-ok.T").write_bytes(b"ok")
    consumer = QueueConsumer(tmp_path, "q", "c")
    with caplog.at_level(logging.WARNING, logger="chute.dropbox"):
        assert bodies(drain(consumer)) == [b"ok"]
    assert names(layout.error) == ["c~4.1000000-link.T", "c~4.1000001-fifo.T"]
    assert "cannot read" in caplog.text
    assert secret.read_bytes() == b"do not deliver"
    assert names(layout.target) == ["a directory"]  # left for a person


def test_a_name_too_long_to_claim_goes_to_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    layout = QueueProducer(tmp_path, "q").layout
    long_name = "x" * 250
    (layout.target / long_name).write_bytes(b"")
    consumer = QueueConsumer(tmp_path, "q", "c" * 10)
    with caplog.at_level(logging.WARNING, logger="chute.dropbox"):
        assert consumer.receive() is None
    assert names(layout.error) == [long_name]
    assert "too long to claim" in caplog.text
