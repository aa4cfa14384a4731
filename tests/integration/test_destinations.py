"""Deleting, purging and the limits on making destinations, over the wire.

The ``chute purge`` and ``chute delete`` commands as a user types them; a user
who makes a thousand queues, refused past ``max_destinations_per_user`` before
and after a restart while another user goes on; what a STOMP subscriber of a
deleted queue sees; idle destinations going. Each test runs its own
``chute serve``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import chute
from chute.errors import AccessDenied, DestinationFull

from .conftest import ChuteServer, free_port, start_server
from .test_cli import chute as run_chute
from .test_stomp import Client

USERS = """
[users.alice]
password = "alice-pw"
roles = ["maker"]

[users.bob]
password = "bob-pw"
roles = ["maker"]

[users.carol]
password = "carol-pw"
roles = ["no-delete"]

[roles.maker]
send = ["*"]
consume = ["*"]
browse = ["*"]
create = ["*"]
delete = ["*"]

[roles.no-delete]
send = ["*"]
consume = ["*"]
browse = ["*"]
create = ["*"]
"""


def test_the_cli_purges_and_deletes_and_says_what_went(server: ChuteServer) -> None:
    for body in ("a", "b"):
        assert run_chute(server, "send", "queue:work", body).returncode == 0
    purged = run_chute(server, "purge", "queue:work")
    assert (purged.returncode, purged.stdout) == (0, b"purged queue:work: 2 messages removed\n")
    assert run_chute(server, "browse", "queue:work").stdout == b""
    assert run_chute(server, "send", "queue:work", "c").returncode == 0
    deleted = run_chute(server, "delete", "queue:work")
    assert deleted.stdout == b"deleted queue:work: 1 message discarded\n"
    again = run_chute(server, "delete", "queue:work")
    assert again.returncode == 1
    assert again.stderr == b"chute: error: queue:work does not exist: nothing to delete\n"
    own = run_chute(server, "delete", "queue:__sys__deadLetter")
    assert own.returncode == 1
    assert b"it can be purged, not deleted" in own.stderr
    assert run_chute(server, "send", "topic:news", "x").returncode == 0
    stat = run_chute(server, "stat")
    assert b"(1 made by use: anonymous 1)" in stat.stdout  # the topic; the queue is gone


def test_a_topic_with_a_durable_subscription_needs_force_on_the_command_line(
    server: ChuteServer,
) -> None:
    with chute.connect(server.url, client_id="app") as conn, conn.session() as s:
        s.consumer("topic:prices", subscription="audit", durable=True).close()
        s.send("topic:prices", "held")
    refused = run_chute(server, "delete", "topic:prices")
    assert refused.returncode == 1
    assert b"1 durable subscriptions (durable:app.audit)" in refused.stderr
    assert b"delete with force" in refused.stderr
    forced = run_chute(server, "delete", "topic:prices", "--force")
    assert forced.stdout == b"deleted topic:prices: 1 message discarded\n"


def test_a_deleted_queue_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    with chute.connect(server.url) as conn, conn.session() as s:
        for queue in ("queue:gone", "queue:kept"):
            s.send(queue, "one")
            s.send(queue, "two")
        assert conn.delete("queue:gone") == 2
    server.stop()
    again = start_server(tmp_path)
    try:
        with chute.connect(again.url) as conn, conn.session() as s:
            addresses = {d["address"] for d in conn.stat()["destinations"]}
            assert "queue:gone" not in addresses
            assert s.browse("queue:gone") == []
            assert [m.text for m in s.browse("queue:kept")] == ["one", "two"]
    finally:
        again.stop()


def test_a_thousand_queues_then_a_user_is_refused_across_a_restart(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(USERS)  # max_destinations_per_user: the default, 1000
    server = start_server(tmp_path, "--config", str(config))
    with chute.connect(server.url, login="alice", passcode="alice-pw") as alice:
        s = alice.session(confirm_window=256)
        for i in range(1000):
            s.send(f"queue:alice.{i}", "x")
        s.flush()
        with pytest.raises(DestinationFull, match=r"user alice has made 1000 destinations"):
            alice.session().send("queue:alice.1000", "x")
        s.send("queue:alice.0", "still hers to use")
        assert alice.stat()["made"]["by_user"] == {"alice": 1000}
    with chute.connect(server.url, login="bob", passcode="bob-pw") as bob:
        bob.session().send("queue:bob.0", "x")
    server.stop()
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url, login="alice", passcode="alice-pw") as alice:
            with pytest.raises(DestinationFull, match="max_destinations_per_user"):
                alice.session().send("queue:alice.1000", "x")
            with (
                chute.connect(server.url, login="carol", passcode="carol-pw") as carol,
                pytest.raises(AccessDenied, match=r"may not delete queue:alice\.0"),
            ):
                carol.delete("queue:alice.0")
            assert alice.delete("queue:alice.0") == 2
            alice.session().send("queue:alice.1000", "x")  # the slot it freed
    finally:
        server.stop()


def test_a_stomp_subscriber_of_a_deleted_queue_gets_an_error(tmp_path: Path) -> None:
    port = free_port()
    server = start_server(tmp_path, "--stomp-port", str(port))
    stomp = Client(port)
    try:
        stomp.conn.subscribe("/queue/gone", id="s1", headers={"receipt": "r1"})
        stomp.receipt("r1")
        with chute.connect(server.url) as conn:
            assert conn.delete("queue:gone") == 0
        error = stomp.error()
        assert error.headers["subscription"] == "s1"
        assert error.headers["code"] == "destination-deleted"
        assert "queue:gone was deleted" in error.headers["message"]
        assert stomp.disconnected.wait(10)  # STOMP's ERROR ends the connection
    finally:
        stomp.close()
        server.stop()


def test_a_destination_made_by_use_and_left_idle_goes(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text("[server]\nexpiry_interval_ms = 50\nauto_delete_after_ms = 200\n")
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as conn, conn.session() as s:
            s.send("queue:scratch", "x")
            with s.consumer("queue:scratch") as consumer:
                received = consumer.receive(timeout=10)
                assert received is not None
                received.ack()
            server.wait_for_line("removed 1 idle destinations")
            assert "queue:scratch" not in {d["address"] for d in conn.stat()["destinations"]}
    finally:
        server.stop()
