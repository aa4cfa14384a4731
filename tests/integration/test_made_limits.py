"""The limits on made destinations hold for every way of making one, and a flood of
unused names cannot lock the other clients out.

A user who may manage only ``queue:alice.*`` makes queues through the admin API:
they count against ``max_destinations_per_user`` as those made by use do. Without
users, one client making a flood of names (each left unused) up to
``max_destinations``, across a restart, does not stop another client from making
its queue: the unused ones are reclaimed; names that hold messages still bind.
Each test runs its own ``chute serve``.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import chute
from chute.errors import DestinationFull

from .conftest import free_port, start_server

LIMITS = """
[server]
max_destinations = 40
max_destinations_per_user = 3
"""
USERS = """
[users.alice]
password = "alice-pw"
roles = ["alice"]

[roles.alice]
manage = ["queue:alice.*"]
create = ["queue:alice.*"]
send = ["queue:alice.*"]
"""


def post(port: int, path: str, body: Any, auth: tuple[str, str]) -> tuple[int, Any]:
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:  # noqa: S310 - http
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_queues_made_through_the_admin_api_count_against_the_users_limit(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(LIMITS + USERS)
    http = free_port()
    server = start_server(tmp_path, "--config", str(config), "--http-port", str(http))
    alice = ("alice", "alice-pw")
    try:
        for i in range(3):
            status, body = post(http, "/api/destinations", {"address": f"alice.{i}"}, alice)
            assert (status, body) == (201, {"address": f"queue:alice.{i}", "created": True})
        with chute.connect(server.url, login="alice", passcode="alice-pw") as conn:
            conn.session().send("queue:alice.0", "x")  # in use: never reclaimed
            conn.session().send("queue:alice.1", "x")
            conn.session().send("queue:alice.2", "x")
            assert conn.stat()["made"]["by_user"] == {"alice": 3}
        status, body = post(http, "/api/destinations", {"address": "alice.3"}, alice)
        assert status == 409, body
        assert body["error"] == "destination-full"
        assert "max_destinations_per_user" in body["message"]
    finally:
        assert server.stop() == 0, server.output
    server = start_server(tmp_path, "--config", str(config), "--http-port", str(http))
    try:  # the count survives a restart
        status, body = post(http, "/api/destinations", {"address": "alice.3"}, alice)
        assert status == 409, body
    finally:
        assert server.stop() == 0, server.output


def test_a_flood_of_unused_names_does_not_lock_everyone_out_across_a_restart(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(LIMITS)
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as flood:
            session = flood.session()
            for i in range(40):  # every name the broker allows, each made and left unused
                session.consumer(f"queue:flood.{i:02}").close()
            assert flood.stat()["made"]["total"] == 40
    finally:
        assert server.stop() == 0, server.output
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as other:
            other.session().send("queue:orders", "made")
            received = other.session().consumer("queue:orders").receive(timeout=10)
            assert received is not None
            assert received.text == "made"
            assert any("reclaimed" in line and "flood.00" in line for line in server.lines)
            # Names that hold messages are not reclaimed: the limit binds.
            filler = other.session()
            for i in range(39):  # with queue:orders, 40
                filler.send(f"queue:full.{i:02}", "x")
            with pytest.raises(DestinationFull, match="max_destinations"):
                other.session().send("queue:one.more", "x")
    finally:
        assert server.stop() == 0, server.output
