"""``chute dropbox ...`` as a user types it: init, send, receive --json, recover."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from chute.dropbox.layout import init_queue
from chute.dropbox.queue import QueueConsumer


def chute_cmd(*args: object, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_init_send_and_receive_json(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    made = chute_cmd("dropbox", "init", root, "orders", "topic:news.eu")
    assert made.returncode == 0, made.stderr
    assert (root / "orders" / "incoming" / "target").is_dir()
    assert (root / "topic-root" / "news" / "eu" / ".incoming" / "target").is_dir()

    sent = chute_cmd(
        "dropbox", "send", "--root", root, "orders", "hello", "--priority", "7",
        "-p", "n=3", "-p", "region=eu", "--ttl", "60000", "--correlation-id", "c1",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert chute_cmd("dropbox", "send", "--root", root, "orders", stdin=b"\xff\x00").returncode == 0

    got = chute_cmd("dropbox", "receive", "--root", root, "orders", "--count", "2", "--json")
    assert got.returncode == 0, got.stderr
    first, second = (json.loads(line) for line in got.stdout.decode().splitlines())
    assert set(first) == {
        "id", "priority", "timestamp", "expiration", "correlation_id", "reply_to", "type",
        "persistent", "redelivered", "delivery_count", "kind", "properties", "property_types",
        "body",
    }  # fmt: skip
    assert (first["body"], first["priority"], first["kind"]) == ("hello", 7, "text")
    assert first["properties"] == {"n": 3, "region": "eu"}
    assert first["property_types"] == {"n": "long", "region": "string"}
    assert first["correlation_id"] == "c1"
    assert first["expiration"] > first["timestamp"]
    assert second["body_base64"] == "/wA="
    assert second["kind"] == "bytes"

    empty = chute_cmd("dropbox", "receive", "--root", root, "orders", "--timeout", "0.2")
    assert empty.returncode == 1
    assert b"received 0 of 1 messages" in empty.stderr


def test_recover_gives_a_dead_consumers_files_back(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    for body in ("a", "b"):
        assert chute_cmd("dropbox", "send", "--root", root, "q", body).returncode == 0
    dead = QueueConsumer(root, "q", "worker-7")
    assert dead.receive() is not None
    assert dead.receive() is not None
    layout = init_queue(root, "q")
    assert len(os.listdir(layout.processing)) == 2

    other = chute_cmd("dropbox", "recover", "--root", root, "q", "--client", "someone-else")
    assert other.returncode == 0
    assert len(os.listdir(layout.processing)) == 2  # only the named client's files
    done = chute_cmd("dropbox", "recover", "--root", root, "q", "--client", "worker-7")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 2
    assert os.listdir(layout.processing) == []
    got = chute_cmd("dropbox", "receive", "--root", root, "q", "--count", "2", "--json")
    assert got.returncode == 0
    assert [json.loads(line)["redelivered"] for line in got.stdout.splitlines()] == [True, True]


def test_a_topic_subscription_and_the_distributor(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    # subscribe first (a receive creates the durable subscription), then publish
    assert chute_cmd(
        "dropbox", "receive", "--root", root, "topic:news", "--subscription", "s",
        "--client", "me", "--timeout", "0",
    ).returncode == 1  # fmt: skip
    assert chute_cmd("dropbox", "send", "--root", root, "topic:news", "published").returncode == 0
    incoming = root / "topic-root" / "news" / ".incoming"
    (incoming / "working" / "f").write_text("dropped")
    os.rename(incoming / "working" / "f", incoming / "target" / "4.1700000000000000-1.T")
    fanned = chute_cmd("dropbox", "distribute", "--root", root, "topic:news")
    assert fanned.returncode == 0
    assert b"distributed 1 file(s)" in fanned.stderr
    got = chute_cmd(
        "dropbox", "receive", "--root", root, "topic:news", "--subscription", "s",
        "--client", "me", "--count", "2",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.decode().split()) == ["dropped", "published"]


def test_bad_input_gets_one_clear_line(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    for args in (
        ("send", "--root", root, "../escape", "x"),
        ("send", "--root", root, "q", "x", "--priority", "12"),
        ("receive", "--root", root, "topic:t"),
        ("recover", "--root", root, "a/b", "--client", "c"),
        ("init", root, "topic-root"),
    ):
        result = chute_cmd("dropbox", *args)
        assert result.returncode in (1, 2), args
        assert b"Traceback" not in result.stderr
        # a usage error (exit 2) is argparse's usage then one line naming the option;
        # any other error is one line
        lines = result.stderr.decode().splitlines()
        if result.returncode == 2 and lines[0].startswith("usage: "):
            assert lines[-1].startswith("chute dropbox "), lines
            assert ": error: argument " in lines[-1], lines
        else:
            assert len(lines) == 1, lines
            assert lines[0].startswith("chute: "), lines
    assert not (tmp_path / "escape").exists()


def test_init_makes_what_dropboxmqs_create_dropbox_makes(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    made = chute_cmd("dropbox", "init", root, "orders", "topic:news.eu")
    assert made.returncode == 0, made.stderr
    states = "associated unassociated prepared committing committed rolling-back rolled-back"
    for path in ["dropboxmq/clients", *(f"dropboxmq/transaction/{s}" for s in states.split())]:
        assert (root / path).is_dir(), path


def test_send_and_receive_obey_dropboxmqs_lock_files(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    assert chute_cmd("dropbox", "init", root, "orders").returncode == 0
    incoming = root / "orders" / "incoming"
    (incoming / "write-lock.properties").write_text("target-limit=1\n")
    assert chute_cmd("dropbox", "send", "--root", root, "orders", "first").returncode == 0
    locked = chute_cmd(
        "dropbox", "send", "--root", root, "orders", "second", "--block-timeout", "0.2"
    )
    assert locked.returncode == 1
    assert b"chute: error: queue:orders: write-locked" in locked.stderr, locked.stderr
    assert len(os.listdir(incoming / "target")) == 1

    (root / "global-read-lock").touch()
    held = chute_cmd("dropbox", "receive", "--root", root, "orders", "--timeout", "0.2")
    assert held.returncode == 1
    assert b"received 0 of 1 messages" in held.stderr
    (root / "global-read-lock").unlink()
    got = chute_cmd("dropbox", "receive", "--root", root, "orders", "--timeout", "5")
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode().strip().endswith("first")
