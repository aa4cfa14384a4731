"""``chute create`` against a real ``chute serve``: a queue, topic or stream made before
anyone uses it, as a user types the command; who may, and the limits it counts against."""

from __future__ import annotations

import json
from pathlib import Path

import chute

from .conftest import ChuteServer, start_server
from .test_cli import chute as run_chute

USERS = """
[server]
max_destinations_per_user = 2

[users.root]
password = "root-pw"
roles = ["admin"]

[users.alice]
password = "alice-pw"
roles = ["alice"]

[roles.alice]
manage = ["queue:alice.*"]
send = ["queue:alice.*"]
"""


def test_create_makes_a_queue_a_topic_and_a_stream_once(server: ChuteServer) -> None:
    made = run_chute(server, "create", "orders")
    assert made.returncode == 0, made.stderr
    assert made.stdout.decode() == "created queue:orders\n"
    again = run_chute(server, "create", "queue:orders")
    assert again.returncode == 0, again.stderr
    assert again.stdout.decode() == "queue:orders exists already\n"
    for address in ("topic:prices", "stream:events"):
        answer = run_chute(server, "create", address, "--json")
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout) == {"address": address, "created": True}
    with chute.connect(server.url) as conn:
        listed = {d["address"]: d for d in conn.stat()["destinations"]}
        assert listed["queue:orders"]["depth"] == 0
        assert listed["topic:prices"]["kind"] == "topic"
        assert listed["stream:events"]["kind"] == "stream"
        assert conn.stat()["made"]["total"] == 0  # an operator's: the broker's own
    bad = run_chute(server, "create", "queue:bad name")
    assert bad.returncode != 0
    assert "chute: error:" in bad.stderr.decode()
    assert b"Traceback" not in bad.stderr


def test_create_needs_manage_and_counts_against_a_users_limit(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(USERS)
    server = start_server(tmp_path, "--config", str(config))
    alice = ("--login", "alice", "--passcode", "alice-pw")
    try:
        refused = run_chute(server, "create", "queue:bob.x", *alice)
        assert refused.returncode == 1
        assert "may not manage queue:bob.x" in refused.stderr.decode(), refused.stderr
        for name in ("alice.1", "alice.2"):
            made = run_chute(server, "create", name, *alice)
            assert made.returncode == 0, made.stderr
        with chute.connect(server.url, login="alice", passcode="alice-pw") as conn:
            for name in ("queue:alice.1", "queue:alice.2"):  # in use: not reclaimed
                conn.session().send(name, "x")
        full = run_chute(server, "create", "alice.3", *alice)
        assert full.returncode == 1
        assert "max_destinations_per_user" in full.stderr.decode(), full.stderr
        root = run_chute(
            server, "create", "queue:alice.3", "--login", "root", "--passcode", "root-pw"
        )
        assert root.returncode == 0, root.stderr  # an operator is held to no user's share
    finally:
        assert server.stop() == 0, server.output
