"""The broker mounts dropbox roots: shell-script files in, plain files out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import chute
from chute.dropbox.layout import init_queue, init_subscription, init_topic
from chute.dropbox.transcoder import decode_filename
from tests.integration.conftest import ChuteServer, start_server

WAIT = 20.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def serve(tmp_path: Path, config: str) -> ChuteServer:
    path = tmp_path / "chute.toml"
    path.write_text(config)
    return start_server(tmp_path, "--config", str(path), "--stomp-port", "0", "--http-port", "0")


def drop(root: Path, queue: str, name: str, body: str) -> None:
    """What a DropboxMQ shell producer does: write in working/, then mv into target/."""
    script = 'cd "$1/$2/incoming" && printf "%s" "$4" > "working/$3" && mv "working/$3" "target/$3"'
    subprocess.run(["sh", "-c", script, "sh", str(root), queue, name, body], check=True)


def count(path: Path) -> int:
    return len(os.listdir(path))


def test_files_from_a_shell_script_reach_a_native_consumer(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    # a file a previous broker had claimed but not settled: taken back at start
    (layout.processing / "chute-bridge~4.1700000000000500-9.T").write_text("left over")
    server = serve(
        tmp_path,
        f"""
[[dropbox]]
root = "{mq}"
destinations = ["orders"]
poll_interval_ms = 50
""",
    )
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
        assert high.id == "1700000000001000-2"
        assert high.correlation_id == "corr-9"
        assert high.reply_to == "queue:replies"
        assert high.type == "Order"
        assert high.properties == {"color": "red", "qty": 5, "price": 9.5, "urgent": True}
        assert high.persistent
        # the left-over file went back to target/ with its delivery count raised
        assert any("JMSXDeliveryCountI=2" in n for n in os.listdir(layout.processed))
    finally:
        server.stop()
    assert "Traceback" not in server.output


def test_a_full_queue_leaves_files_in_target_until_there_is_room(tmp_path: Path) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    server = serve(
        tmp_path,
        f"""
[destinations."queue:orders"]
max_messages = 1
overflow = "reject"

[[dropbox]]
root = "{mq}"
destinations = ["orders"]
poll_interval_ms = 50
""",
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
    server = serve(
        tmp_path,
        f"""
[[dropbox]]
root = "{out}"
destinations = ["queue:results"]
direction = "export"
""",
    )
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
            depth = {d["address"]: d["depth"] for d in conn.stat()["destinations"]}
        assert depth.get("queue:results", 0) == 0
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
        tmp_path,
        f"""
[[dropbox]]
root = "{inbound}"
destinations = ["topic:alerts"]
poll_interval_ms = 50

[[dropbox]]
root = "{outbound}"
destinations = ["topic:news"]
direction = "export"
""",
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
    config = f"""
[[dropbox]]
root = "{mq}"
destinations = ["orders"]
batch = 16
"""
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
        f"""
[users.importer]
password = "pw"
roles = ["elsewhere"]

[users.root]
password = "pw"
roles = ["admin"]

[roles.elsewhere]
send = ["queue:other"]

[[dropbox]]
root = "{mq}"
destinations = ["orders"]
poll_interval_ms = 50
user = "importer"
""",
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
