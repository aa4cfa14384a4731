"""The broker mounts dropbox roots: shell-script files in, plain files out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import chute
from chute.dropbox.layout import init_queue, init_subscription, init_topic
from chute.dropbox.transcoder import decode_filename
from tests.integration.dropbox_bridge import (
    WAIT,
    count,
    drop,
    export_mount,
    import_mount,
    mount,
    serve,
    wait_until,
)


def test_files_from_a_shell_script_reach_a_native_consumer(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    # a file a previous broker had claimed but not settled: taken back at start
    (layout.processing / "chute-bridge~4.1700000000000500-9.T").write_text("left over")
    server = serve(tmp_path, import_mount(mq, "orders"))
    try:
        soon = int(time.time() * 1000) + 1500
        drop(mq, "orders", "2.1700000000000000-1.T....colorS=blue", "low")
        drop(
            mq,
            "orders",
            "8.1700000000001000-2.T..corr-9.Qreplies.Order."
            "colorS=red&qtyI=5&priceD=9.5&urgentB=true",
            "high",
        )
        drop(mq, "orders", "9.1700000000002000-3.T.1000", "expired long ago")
        drop(mq, "orders", f"9.1700000000003000-4.T.{soon}", "expires in the broker")
        wait_until(lambda: count(layout.processed) == 4, "four files imported")
        assert count(layout.expired) == 1  # expired before it was taken: never imported
        assert count(layout.target) == count(layout.processing) == 0
        wait_until(lambda: time.time() * 1000 > soon + 50, "the short expiry to pass")

        with chute.connect(server.url) as conn, conn.session(ack="client") as session:
            consumer = session.consumer("queue:orders")
            got = []
            while (message := consumer.receive(timeout=1.0)) is not None:
                got.append(message)
                message.ack()
        assert [m.text for m in got] == ["high", "left over", "low"]  # by priority 8, 4, 2
        high = got[0]
        assert high.priority == 8
        assert high.id == "ID:1700000000001000-2"  # JMS's id, as DropboxMQ's consumer reads it
        assert high.correlation_id == "corr-9"
        assert high.reply_to == "queue:replies"
        assert high.type == "Order"
        assert high.properties == {"color": "red", "qty": 5, "price": 9.5, "urgent": True}
        assert high.persistent
        assert high.timestamp == 1700000000001  # the id's ms*1000+seq: DropboxMQ's JMSTimestamp
        assert [m.redelivered for m in got] == [False, True, False]
        left_over = got[1]  # back in target/ with its delivery count raised, then imported
        assert left_over.delivery_count == 2
        assert any("JMSXDeliveryCountI=2" in n for n in os.listdir(layout.processed))
    finally:
        server.stop()
    assert "Traceback" not in server.output


def test_a_full_queue_leaves_files_in_target_until_there_is_room(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    server = serve(
        tmp_path,
        """
[destinations."queue:orders"]
max_messages = 1
overflow = "reject"
""",
        import_mount(mq, "orders"),
    )
    try:
        drop(mq, "orders", "4.1700000000000000-1.T", "first")
        wait_until(lambda: count(layout.processed) == 1, "the first file imported")
        drop(mq, "orders", "4.1700000000001000-2.T", "second")
        with chute.connect(server.url) as conn, conn.session() as session:
            consumer = session.consumer("queue:orders")
            first = consumer.receive(timeout=WAIT)
            assert first is not None
            assert first.text == "first"
            second = consumer.receive(timeout=WAIT)  # imported once there was room
            assert second is not None
            assert second.text == "second"
        wait_until(lambda: count(layout.processed) == 2, "the second file settled")
        assert count(layout.target) == count(layout.processing) == 0
    finally:
        server.stop()


def test_an_exported_queue_is_files_ls_and_cat_can_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    server = serve(tmp_path, export_mount(out, "queue:results"))
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            for i in range(3):
                session.send("results", f"result {i}", priority=i + 3, properties={"n": i})
        target = out / "results" / "incoming" / "target"
        wait_until(lambda: target.is_dir() and count(target) == 3, "three exported files")
        listing = subprocess.run(
            ["sh", "-c", 'cd "$1" && ls && cat *', "sh", str(target)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        names = listing.splitlines()[:3]
        assert "result 0" in listing
        assert "result 1" in listing
        assert "result 2" in listing
        decoded = sorted((decode_filename(n) for n in names), key=lambda d: d.priority)
        assert [d.priority for d in decoded] == [3, 4, 5]
        assert [d.properties for d in decoded] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert count(out / "results" / "incoming" / "working") == 0
        with chute.connect(server.url) as conn:  # acked once written: nothing left

            def depth() -> int:
                found = {d["address"]: d["depth"] for d in conn.stat()["destinations"]}
                return int(found.get("queue:results", 0))

            wait_until(lambda: depth() == 0, "the written messages acked")
    finally:
        server.stop()


def test_a_bad_mount_stops_the_broker_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    path = tmp_path / "chute.toml"
    path.write_text(f'[[dropbox]]\nroot = "{tmp_path / "file"}"\ndestinations = ["q"]\n')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chute.cli",
            "serve",
            "--config",
            str(path),
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--stomp-port",
            "0",
            "--http-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "chute: error" in result.stderr
    assert "Traceback" not in result.stderr


def test_topics_are_bridged_both_ways(tmp_path: Path) -> None:
    inbound, outbound = tmp_path / "in", tmp_path / "out"
    subscriber = init_topic(outbound, "news")
    subscription = init_subscription(subscriber, "reader", "ls-user")  # a file-only reader
    server = serve(
        tmp_path, import_mount(inbound, "topic:alerts"), export_mount(outbound, "topic:news")
    )
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            alerts = session.consumer("topic:alerts")
            incoming = inbound / "topic-root" / "alerts" / ".incoming"
            assert (incoming / "target").is_dir()  # mounted before the broker said ready
            script = (
                'cd "$1" && printf fire > working/a && mv working/a "target/9.1700000000000000-1.T"'
            )
            subprocess.run(["sh", "-c", script, "sh", str(incoming)], check=True)
            got = alerts.receive(timeout=WAIT)
            assert got is not None
            assert (got.text, got.priority) == ("fire", 9)

            session.send("topic:news", "extra! extra!")
            wait_until(lambda: count(subscription.target) == 1, "the exported copy")
        [name] = os.listdir(subscription.target)
        assert (subscription.target / name).read_text() == "extra! extra!"
    finally:
        server.stop()


def test_a_broker_killed_mid_import_loses_no_file(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    total = 1500
    for i in range(total):  # dropped before the broker starts, as a backlog
        (layout.working / f"m{i}").write_text(f"body {i}")
        os.rename(layout.working / f"m{i}", layout.target / f"4.{1700000000000000 + i}-1.T")
    config = mount(mq, "orders", batch=16)
    server = serve(tmp_path, config)
    wait_until(lambda: count(layout.processed) > 0, "the import to start")
    server.stop(signal.SIGKILL)
    assert count(layout.target) + count(layout.processing) > 0  # killed mid-import

    server = serve(tmp_path, config)  # the same data dir and journal
    try:
        wait_until(lambda: count(layout.processed) >= total, "every file imported")
        bodies: set[str] = set()
        with chute.connect(server.url) as conn, conn.session(ack="client") as session:
            consumer = session.consumer("queue:orders")
            while (message := consumer.receive(timeout=1.0)) is not None:
                bodies.add(message.text)
                message.ack()
        assert bodies == {f"body {i}" for i in range(total)}  # at least once, none lost
        assert count(layout.target) == count(layout.processing) == 0
    finally:
        server.stop()


def test_the_bridge_acts_as_its_configured_user(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    server = serve(
        tmp_path,
        """
[users.importer]
password = "pw"
roles = ["elsewhere"]

[users.root]
password = "pw"
roles = ["admin"]

[roles.elsewhere]
send = ["queue:other"]
""",
        import_mount(mq, "orders", user="importer"),
    )
    try:
        drop(mq, "orders", "4.1700000000000000-1.T", "not allowed in")
        wait_until(
            lambda: any("may not send queue:orders" in line for line in server.lines),
            "the refusal in the log",
        )
        assert count(layout.processed) == 0  # nothing imported, nothing lost:
        wait_until(lambda: count(layout.target) == 1, "the file back in target/")
        with chute.connect(server.url, login="root", passcode="pw") as conn, conn.session() as s:
            assert s.browse("queue:orders") == []
    finally:
        server.stop()


def publish_as_dropboxmq(root: Path, topic: str, name: str, body: str) -> None:
    """What DropboxMQ's topic publisher does: a copy into every subscription of the topic
    and of the topics above it (working/, then mv into target/), and its own copy
    straight into .incoming/processed; nothing reaches .incoming/target."""
    script = """
topic_dir="$1/topic-root/$2"
dir="$topic_dir"
while [ "$dir" != "$1/topic-root" ]; do
  for sub in "$dir"/.subscriptions/*/; do
    [ -d "$sub" ] || continue
    printf "%s" "$4" > "$sub/working/$3" && mv "$sub/working/$3" "$sub/target/$3"
  done
  dir=$(dirname "$dir")
done
printf "%s" "$4" > "$topic_dir/.incoming/processed/$3"
"""
    path = topic.replace(".", "/")
    subprocess.run(["sh", "-c", script, "sh", str(root), path, name, body], check=True)


def test_a_dropboxmq_publisher_s_messages_reach_the_broker_once(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    topic = init_topic(mq, "alerts")
    reader = init_subscription(topic, "reader", "ls-user")  # a DropboxMQ subscriber beside
    server = serve(tmp_path, import_mount(mq, "topic:alerts"))
    try:
        own = topic.subscription("chute-bridge", "chute-bridge")  # made before "ready"
        assert own.target.is_dir()
        with chute.connect(server.url) as conn, conn.session() as session:
            alerts = session.consumer("topic:alerts")
            sent = {f"4.{1700000000000000 + i * 1000}-{i}.T": f"alert {i}" for i in range(50)}
            for name, body in sent.items():
                publish_as_dropboxmq(mq, "alerts", name, body)
            got: list[chute.Received] = []
            while len(got) < len(sent) and (message := alerts.receive(timeout=WAIT)) is not None:
                got.append(message)
            assert alerts.receive(timeout=0.5) is None  # nothing twice
        assert sorted(m.text for m in got) == sorted(sent.values())
        for message in got:  # "alert i" was sent at ms 1700000000000 + i (its id's digits)
            assert message.timestamp == 1700000000000 + int(message.text.split()[1])
            assert not message.redelivered
        wait_until(lambda: count(own.processed) == len(sent), "every copy settled")
        assert count(reader.target) == len(sent)  # the other subscriber's copies untouched
        assert count(topic.incoming.processed) == len(sent)  # the publisher's own, left alone
    finally:
        server.stop()
    assert "Traceback" not in server.output


def test_files_in_incoming_are_distributed_up_the_topic_tree_and_imported_once(
    tmp_path: Path,
) -> None:
    mq = tmp_path / "mq"
    europe = init_topic(mq, "news.eu")
    reader = init_subscription(europe, "reader", "ls-user")
    server = serve(tmp_path, import_mount(mq, "topic:news", "topic:news.eu"))
    incoming = europe.incoming
    script = 'cd "$1" && printf "%s" "$3" > working/m && mv working/m "target/$2"'
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            news = session.consumer("topic:news")
            eu = session.consumer("topic:news.eu")
            for base, name, body in (
                (incoming.base, "4.1700000000000000-1.T", "for europe"),
                (init_topic(mq, "news").incoming.base, "4.1700000000001000-2.T", "for all"),
            ):
                subprocess.run(["sh", "-c", script, "sh", str(base), name, body], check=True)
            got_news = [news.receive(timeout=WAIT), news.receive(timeout=WAIT)]
            got_eu = eu.receive(timeout=WAIT)
            assert news.receive(timeout=0.5) is None
            assert eu.receive(timeout=0.5) is None
        assert sorted(m.text for m in got_news if m is not None) == ["for all", "for europe"]
        assert got_eu is not None
        assert got_eu.text == "for europe"  # what goes to "news" does not go down
        assert os.listdir(reader.target) == ["4.1700000000000000-1.T"]  # distributed to it too
        wait_until(lambda: count(incoming.processed) == 1, "the fanned-out file settled")
        assert count(incoming.target) == count(incoming.processing) == 0
    finally:
        server.stop()
    assert "Traceback" not in server.output


def test_an_exported_topic_reaches_the_subscribers_above_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    top = init_subscription(init_topic(out, "news"), "all", "alice")
    own = init_subscription(init_topic(out, "news.eu"), "europe", "bob")
    sibling = init_subscription(init_topic(out, "news.us"), "america", "carol")
    server = serve(tmp_path, export_mount(out, "topic:news.eu"))
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            session.send("topic:news.eu", "bonjour")
            wait_until(lambda: count(top.target) == count(own.target) == 1, "two copies")
        assert os.listdir(top.target) == os.listdir(own.target)
        assert count(sibling.target) == 0
    finally:
        server.stop()


def test_a_relayed_message_keeps_the_timestamp_of_its_name(tmp_path: Path) -> None:
    inbound, outbound = tmp_path / "in", tmp_path / "out"
    init_queue(inbound, "orders")
    server = serve(
        tmp_path, import_mount(inbound, "orders"), export_mount(outbound, "queue:orders")
    )
    name = "6.1600000000123045-1234567890.T"  # sent 2020-09-13, sequence 45
    try:
        drop(inbound, "orders", name, "old news")
        target = outbound / "orders" / "incoming" / "target"
        wait_until(lambda: target.is_dir() and count(target) == 1, "the relayed file")
    finally:
        server.stop()
    [relayed] = os.listdir(target)
    sent, read = decode_filename(name), decode_filename(relayed)
    assert (read.id, read.timestamp, read.priority) == (sent.id, sent.timestamp, 6)
    assert read.timestamp == 1600000000123


def test_a_re_import_after_a_crash_stays_redelivered_across_a_restart(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    # what a broker killed between its sync and the move leaves: a claimed file
    (layout.processing / "chute-bridge~4.1700000000000000-1.T").write_text("maybe seen")
    config = import_mount(mq, "orders")
    server = serve(tmp_path, config)
    wait_until(lambda: count(layout.processed) == 1, "the re-import")
    server.stop(signal.SIGKILL)  # before anyone consumed it
    server = serve(tmp_path, config)  # the same journal
    try:
        with chute.connect(server.url) as conn, conn.session(ack="client") as session:
            message = session.consumer("queue:orders").receive(timeout=WAIT)
            assert message is not None
            assert (message.text, message.redelivered, message.delivery_count) == (
                "maybe seen",
                True,
                2,
            )
            assert message.timestamp == 1700000000000
            message.ack()
    finally:
        server.stop()


def test_export_waits_while_dropboxmq_s_write_lock_holds_and_the_broker_still_stops(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    layout = init_queue(out, "results")
    lock = layout.base / "write-lock.properties"
    lock.touch()  # DropboxMQ's flow control: an empty file stops every writer
    server = serve(tmp_path, export_mount(out, "queue:results"))
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            session.send("results", "held back")
        server.wait_for_line("write-locked by")
        assert count(layout.target) == 0  # it waits in the broker, not in a file
        lock.unlink()
        wait_until(lambda: count(layout.target) == 1, "the file once the lock is gone")
        lock.touch()
        mark = len(server.lines)
        with chute.connect(server.url) as conn, conn.session() as session:
            session.send("results", "held at stop")
        server.wait_for_line("write-locked by", start=mark)
    finally:
        code = server.stop()
    assert code == 0  # the export's wait ended with the broker
    assert count(layout.target) == 1
