"""What the console asks of the admin API, against a real ``chute serve``: the state an
operator looks at first, a filter the server applies to every destination, bodies
that are text whatever their kind, and publishing and taking messages.

Plain HTTP requests (urllib); chute and STOMP clients make the state the API looks
at and check what it did.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chute

from .admin_calls import ALICE, ALICE_USERS, Broker, call, expect_error, quote, until
from .conftest import free_port, start_server
from .test_cli import chute as run_chute
from .test_stomp import Client

pytestmark = pytest.mark.acceptance

CONFIG = f"""
[server]
disk_free_limit = "32MiB"

[destinations."queue:console.tight"]
max_messages = 1
overflow = "block"
{ALICE_USERS}"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("console-api")
    config = tmp / "chute.toml"
    config.write_text(CONFIG)
    http, stomp = free_port(), free_port()
    srv = start_server(
        tmp, "--config", str(config), "--http-port", str(http), "--stomp-port", str(stomp)
    )
    srv.stomp_port = stomp  # type: ignore[attr-defined]
    yield Broker(srv, http)
    assert srv.stop() == 0, srv.output


def browse(broker: Broker, address: str, **auth: Any) -> list[dict[str, Any]]:
    answer = call(broker, "GET", f"/api/destinations/{quote(address)}/messages", **auth)
    assert answer.status == 200, answer
    messages: list[dict[str, Any]] = answer.body["messages"]
    return messages


def test_the_filter_finds_a_destination_past_the_first_thousands(broker: Broker) -> None:
    with broker.connect() as conn:
        session = conn.session(confirm_window=256)
        for i in range(2500):
            session.send(f"queue:bulk.{i:04}", "x")
        session.send("queue:zz.Needle.orders", "x")
        session.flush()
    found = call(broker, "GET", "/api/destinations?contains=needle")
    assert found.status == 200, found
    assert [d["address"] for d in found.body["destinations"]] == ["queue:zz.Needle.orders"]
    assert found.body["next"] is None
    paged = call(broker, "GET", "/api/destinations?contains=bulk.24&limit=5")
    assert [d["address"] for d in paged.body["destinations"]] == [
        f"queue:bulk.24{i:02}" for i in range(5)
    ]
    assert paged.body["next"] == "queue:bulk.2404"


def test_bodies_that_are_text_show_as_text_whatever_their_kind(broker: Broker) -> None:
    stomp = Client(broker.server.stomp_port, login="admin", passcode="admin-pw")  # type: ignore[attr-defined]
    try:
        stomp.conn.send(
            "/queue/console.text",
            '{"order": 1}',
            headers={"content-type": "application/json", "receipt": "r1"},
        )
        stomp.receipt("r1")
    finally:
        stomp.close()
    sent = run_chute(
        broker.server,
        "send",
        "queue:console.text",
        "--login",
        "admin",
        "--passcode",
        "admin-pw",
        stdin=b"line one\nline two\n",
    )
    assert sent.returncode == 0, sent.stderr
    with broker.connect() as conn:
        conn.session().send("queue:console.text", b"\x00\x01binary\xff")
    views = browse(broker, "queue:console.text")
    assert [(m["kind"], m["body_encoding"], m["body"]) for m in views[:2]] == [
        ("bytes", "utf-8", '{"order": 1}'),
        ("bytes", "utf-8", "line one\nline two\n"),
    ]
    assert views[2]["body_encoding"] == "base64"


def test_the_overview_shows_memory_disk_and_who_waits(broker: Broker) -> None:
    overview = call(broker, "GET", "/api/overview").body
    assert overview["memory"]["high_watermark"] == 256 << 20
    assert overview["memory"]["low_watermark"] == int((256 << 20) * 0.9)  # the default
    assert overview["disk"]["free_limit"] == 32 << 20
    assert overview["disk"]["free_bytes"] > 0
    assert overview["producers"]["waiting"] == 0
    assert overview["blocked_connections"] == 0
    stomp = Client(broker.server.stomp_port, login="admin", passcode="admin-pw")  # type: ignore[attr-defined]
    try:
        for n in range(2):  # the second waits for room: overflow = block, max_messages 1
            stomp.conn.send("/queue/console.tight", f"m{n}")
        until(
            lambda: call(broker, "GET", "/api/overview").body["blocked_connections"] == 1,
            "the blocked producer to show",
        )
        with broker.connect() as conn:
            consumer = conn.session().consumer("queue:console.tight")
            for _ in range(2):
                assert consumer.receive(timeout=10) is not None
        until(
            lambda: call(broker, "GET", "/api/overview").body["blocked_connections"] == 0,
            "the producer to go on",
        )
    finally:
        stomp.close()


def test_publish_then_get_with_and_without_requeue(broker: Broker) -> None:
    address = "queue:console.pub"
    assert call(broker, "POST", "/api/destinations", {"address": address}).status == 201
    path = f"/api/destinations/{quote(address)}"
    for n in range(3):
        answer = call(
            broker,
            "POST",
            f"{path}/publish",
            {"body": f"hello {n}", "properties": {"n": n, "eu": True}, "priority": 6},
        )
        assert answer.status == 200, answer
        assert answer.body["published"] is True
    blob = call(
        broker,
        "POST",
        f"{path}/publish",
        {"body": "AAEC", "body_encoding": "base64", "content_type": "application/octet-stream"},
    )
    assert blob.status == 200, blob
    peeked = call(broker, "POST", f"{path}/get", {"count": 2, "requeue": True})
    assert peeked.status == 200, peeked
    assert [m["body"] for m in peeked.body["messages"]] == ["hello 0", "hello 1"]
    assert peeked.body["messages"][0]["properties"] == {"n": 0, "eu": True}
    assert call(broker, "GET", path).body["depth"] == 4  # given back
    assert [m["redelivered"] for m in browse(broker, address)[:3]] == [True, True, False]
    taken = call(broker, "POST", f"{path}/get", {"count": 3})
    assert [m["body"] for m in taken.body["messages"]] == ["hello 0", "hello 1", "hello 2"]
    assert taken.body["requeued"] is False
    with broker.connect() as conn:
        left = conn.session().consumer(address).receive(timeout=10)
        assert left is not None
        assert left.body == b"\x00\x01\x02"
        assert left.properties["content-type"] == "application/octet-stream"
    assert call(broker, "POST", f"{path}/get", {}).body["messages"] == []
    expect_error(call(broker, "POST", f"{path}/get", {"count": 0}), 400)
    expect_error(call(broker, "POST", f"{path}/publish", {"body": "x", "bogus": 1}), 400)
    expect_error(call(broker, "POST", f"{path}/publish", {"priority": 12}), 400)
    expect_error(call(broker, "POST", "/api/destinations/topic:none/get", {}), 404)
    missing = call(broker, "POST", "/api/destinations/queue:console.none/publish", {})
    expect_error(missing, 404)


def test_a_user_who_manages_some_destinations_publishes_and_gets_there_only(
    broker: Broker,
) -> None:
    made = call(broker, "POST", "/api/destinations", {"address": "alice.inbox"}, auth=ALICE)
    assert made.status == 201, made
    path = "/api/destinations/queue:alice.inbox"
    assert call(broker, "POST", f"{path}/publish", {"body": "hi"}, auth=ALICE).status == 200
    got = call(broker, "POST", f"{path}/get", {}, auth=ALICE)
    assert [m["body"] for m in got.body["messages"]] == ["hi"]
    refused = call(
        broker, "POST", "/api/destinations/queue:console.pub/publish", {"body": "x"}, auth=ALICE
    )
    expect_error(refused, 403, "forbidden")
    listed = call(broker, "GET", "/api/destinations", auth=ALICE).body["destinations"]
    assert [d["address"] for d in listed] == ["queue:alice.inbox"]


def test_the_no_users_broker_answers_contains_too(tmp_path: Path) -> None:
    http = free_port()
    srv = start_server(tmp_path, "--http-port", str(http))
    try:
        with chute.connect(srv.url) as conn:
            conn.session().send("queue:Orders.EU", "x")
            conn.session().send("queue:other", "x")
        found = call(Broker(srv, http), "GET", "/api/destinations?contains=orders.eu", auth=None)
        assert [d["address"] for d in found.body["destinations"]] == ["queue:Orders.EU"]
    finally:
        assert srv.stop() == 0, srv.output
