"""The admin API over HTTP, against a ``chute serve`` subprocess with users.

Plain HTTP requests (urllib) as curl or a script would send them; chute
clients on the native port make the state the API looks at (messages,
consumers, subscriptions, prepared transactions, cursors) and check that what
the API did really happened (a moved message is received from its target, a
retried dead letter is back in its queue, a closed connection fails).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chute
from chute.errors import ChuteError, ConnectError

from .admin_calls import DEADLINE, USERS, VIEWER, Answer, Broker, call, expect_error, quote, until
from .conftest import free_port, start_server

pytestmark = pytest.mark.acceptance


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("admin-api")
    config = tmp / "chute.toml"
    config.write_text(USERS)
    http = free_port()
    srv = start_server(tmp, "--config", str(config), "--http-port", str(http))
    yield Broker(srv, http)
    assert srv.stop() == 0, srv.output


def job_done(broker: Broker, started: Answer) -> dict[str, Any]:
    """The move job ``started`` answered for, once it ended."""
    assert started.status == 202, started
    assert started.headers["Location"] == f"/api/moves/{started.body['id']}"

    def ended() -> dict[str, Any] | None:
        job: dict[str, Any] = call(broker, "GET", started.headers["Location"]).body
        return None if job["state"] == "running" else job

    job: dict[str, Any] = until(ended, "the move job's end")
    return job


def send(broker: Broker, address: str, *bodies: str | bytes, **kwargs: Any) -> None:
    with broker.connect() as conn, conn.session() as session:
        for body in bodies:
            session.send(address, body, **kwargs)


# -- authentication and browsers ------------------------------------------------------


def test_the_document_is_served_to_anyone_and_names_every_path(broker: Broker) -> None:
    answer = call(broker, "GET", "/api/openapi.json", auth=None)
    assert answer.status == 200
    assert answer.body["openapi"].startswith("3.")
    paths = answer.body["paths"]
    assert "/api/destinations/{address}/messages/{seq}" in paths
    assert "/api/transactions/{xid}/commit" in paths
    assert len(paths) == 22


def test_no_credentials_or_a_wrong_password_is_401_with_a_basic_challenge(
    broker: Broker,
) -> None:
    for auth in (None, ("admin", "wrong"), ("nobody", "x")):
        answer = call(broker, "GET", "/api/overview", auth=auth)
        expect_error(answer, 401, "unauthorized")
        assert answer.headers["WWW-Authenticate"] == 'Basic realm="chute"'
    answer = call(broker, "GET", "/api/overview", auth=None, headers={"Authorization": "Bearer x"})
    assert "send HTTP Basic credentials" in expect_error(answer, 401)


def test_a_user_without_manage_is_refused_403(broker: Broker) -> None:
    send(broker, "queue:viewer.q", "x")
    assert "manage" in expect_error(call(broker, "GET", "/api/overview", auth=VIEWER), 403)
    for method, path in (
        ("GET", "/api/destinations/queue:viewer.q"),
        ("GET", "/api/destinations/queue:viewer.q/messages"),
        ("POST", "/api/destinations/queue:viewer.q/purge"),
        ("DELETE", "/api/destinations/queue:viewer.q"),
        ("GET", "/api/connections"),
        ("GET", "/api/cursors"),
        ("GET", "/api/transactions"),
    ):
        expect_error(call(broker, method, path, auth=VIEWER), 403, "forbidden")
    listed = call(broker, "GET", "/api/destinations", auth=VIEWER)
    assert listed.body == {"destinations": [], "next": None}  # only what one may manage
    depth = call(broker, "GET", "/api/destinations/queue:viewer.q").body["depth"]
    assert depth == 1  # the refused purge purged nothing


def test_a_foreign_page_may_not_change_anything_and_bodies_must_be_json(broker: Broker) -> None:
    send(broker, "queue:csrf", "keep me")
    evil = {"Origin": "https://evil.example"}
    refused = call(broker, "POST", "/api/destinations/queue:csrf/purge", headers=evil)
    assert "allowed_origins" in expect_error(refused, 403, "origin-not-allowed")
    own = {"Origin": f"http://127.0.0.1:{broker.http}"}
    assert call(broker, "GET", "/api/destinations/queue:csrf", headers=evil).status == 200
    form = call(
        broker,
        "POST",
        "/api/destinations",
        raw=b"address=queue:x",
        headers={**own, "Content-Type": "application/x-www-form-urlencoded"},
    )
    expect_error(form, 415, "unsupported-media-type")
    assert call(broker, "GET", "/api/destinations/queue:csrf").body["depth"] == 1
    purged = call(broker, "POST", "/api/destinations/queue:csrf/purge", headers=own)
    assert purged.body == {"purged": 1}
    # the console's page, from the name the broker is reached by, is the broker's own
    named = {
        "Host": f"broker.example:{broker.http}",
        "Origin": f"http://broker.example:{broker.http}",
    }
    assert call(broker, "POST", "/api/destinations/queue:csrf/purge", headers=named).status == 200


# -- the broker and its destinations --------------------------------------------------


def test_the_overview(broker: Broker) -> None:
    with broker.connect():
        body = call(broker, "GET", "/api/overview").body
        assert body["version"] == chute.__version__
        assert body["ready"] is True
        assert body["connections"] >= 1
        assert body["uptime_s"] >= 0
        assert body["disk"]["free_bytes"] > 0
        assert {"held", "high_watermark"} <= set(body["memory"])
        assert body["destination_count"] >= 2  # the dead letters and the expired


def test_create_list_page_and_look_at_destinations(broker: Broker) -> None:
    made = call(broker, "POST", "/api/destinations", {"address": "queue:made.one"})
    assert (made.status, made.body) == (201, {"address": "queue:made.one", "created": True})
    again = call(broker, "POST", "/api/destinations", {"address": "made.one"})
    assert (again.status, again.body) == (200, {"address": "queue:made.one", "created": False})
    assert call(broker, "POST", "/api/destinations", {"address": "topic:made.t"}).status == 201
    send(broker, "queue:made.two", "a", "b")
    page = call(broker, "GET", "/api/destinations?pattern=queue:made.*&limit=1").body
    assert [d["address"] for d in page["destinations"]] == ["queue:made.one"]
    assert page["next"] == "queue:made.one"
    rest = call(broker, "GET", "/api/destinations?pattern=queue:made.*&after=queue:made.one").body
    (two,) = rest["destinations"]
    assert (two["address"], two["depth"], two["enqueued"], rest["next"]) == (
        "queue:made.two",
        2,
        2,
        None,
    )
    assert set(two["rates"]) == {"enqueued", "delivered", "acked"}
    topic = call(broker, "GET", "/api/destinations/topic:made.t").body
    assert (topic["kind"], topic["subscriptions"], topic["consumers_detail"]) == ("topic", [], [])
    with broker.connect() as conn, conn.session() as session:
        session.consumer("queue:made.two", prefetch=7)
        one = call(broker, "GET", "/api/destinations/queue:made.two").body
        (consumer,) = one["consumers_detail"]
        assert (consumer["prefetch"], consumer["connection"]) == (7, conn.connection_id)


def test_rates_show_what_goes_through_per_second(broker: Broker) -> None:
    call(broker, "POST", "/api/destinations", {"address": "queue:rated"})

    def rate() -> float:
        send(broker, "queue:rated", "tick")
        dest = call(broker, "GET", "/api/destinations/queue:rated").body
        enqueued: float = dest["rates"]["enqueued"]
        return enqueued

    assert until(lambda: rate() > 0, "an enqueue rate") > 0


def test_bad_input_is_400_and_unknown_things_404(broker: Broker) -> None:
    bad_name = quote("queue:no spaces")
    assert "invalid destination name" in expect_error(
        call(broker, "GET", f"/api/destinations/{bad_name}"), 400, "invalid-address"
    )
    assert "does not exist" in expect_error(
        call(broker, "GET", "/api/destinations/queue:nowhere"), 404, "not-found"
    )
    expect_error(call(broker, "GET", "/api/destinations?limit=-1"), 400)
    expect_error(call(broker, "GET", "/api/destinations?pattern=qeueu:x"), 400)
    for raw in (b"{", b"[1]", b'"x"'):
        answer = call(
            broker,
            "POST",
            "/api/destinations",
            raw=raw,
            headers={"Content-Type": "application/json"},
        )
        expect_error(answer, 400)
    assert "unknown field" in expect_error(
        call(broker, "POST", "/api/destinations", {"address": "queue:x", "durable": True}), 400
    )
    expect_error(call(broker, "POST", "/api/destinations", {"address": 5}), 400)
    expect_error(call(broker, "GET", "/api/no/such/path"), 404, "not-found")
    answer = call(broker, "PUT", "/api/overview", {})
    expect_error(answer, 405, "method-not-allowed")
    assert "GET" in answer.headers["Allow"]


def test_delete_and_purge(broker: Broker) -> None:
    send(broker, "queue:gone", "a", "b", "c")
    assert call(broker, "POST", "/api/destinations/queue:gone/purge").body == {"purged": 3}
    send(broker, "queue:gone", "d")
    assert call(broker, "DELETE", "/api/destinations/queue:gone").body == {"deleted": 1}
    expect_error(call(broker, "DELETE", "/api/destinations/queue:gone"), 404)
    expect_error(call(broker, "POST", "/api/destinations/queue:gone/purge"), 404)
    with broker.connect(client_id="keeper") as conn, conn.session() as session:
        session.consumer("topic:kept", subscription="audit", durable=True).close()
    refused = call(broker, "DELETE", "/api/destinations/topic:kept")
    assert "force" in expect_error(refused, 409)
    expect_error(call(broker, "DELETE", "/api/destinations/topic:kept?force=yes"), 400)
    forced = call(broker, "DELETE", "/api/destinations/topic:kept?force=true")
    assert forced.status == 200


# -- messages -------------------------------------------------------------------------


def test_browse_pages_bodies_and_properties(broker: Broker) -> None:
    big = "é" * 40_000  # 80,000 bytes of UTF-8: cut on a character boundary
    with broker.connect() as conn, conn.session() as session:
        session.send("queue:look", "hello", properties={"n": 1, "f": float("nan"), "s": "x"})
        session.send("queue:look", b"\x00\xff", correlation_id="c1", priority=7)
        session.send("queue:look", big)
    page = call(broker, "GET", "/api/destinations/queue:look/messages").body
    assert page["done"] is True
    text, data, large = page["messages"]
    assert (text["body"], text["body_encoding"], text["kind"], text["size"]) == (
        "hello",
        "utf-8",
        "text",
        5,
    )
    assert text["properties"] == {"n": 1, "f": "NaN", "s": "x"}
    assert text["property_types"] == {"n": "long", "f": "double", "s": "string"}
    assert (data["body"], data["body_encoding"], data["correlation_id"], data["priority"]) == (
        base64.b64encode(b"\x00\xff").decode(),
        "base64",
        "c1",
        7,
    )
    assert (large["size"], large["truncated"]) == (80_000, True)
    assert large["body"] == "é" * 32_768
    assert text["seq"] < data["seq"] < large["seq"]
    first = call(broker, "GET", "/api/destinations/queue:look/messages?limit=1").body
    assert [m["body"] for m in first["messages"]] == ["hello"]
    assert first["done"] is False
    after, before = first["after"], first["before"]
    second = call(
        broker,
        "GET",
        f"/api/destinations/queue:look/messages?limit=1&after={after}&before={before}",
    ).body
    assert [m["seq"] for m in second["messages"]] == [data["seq"]]
    chosen = call(
        broker, "GET", "/api/destinations/queue:look/messages?selector=" + quote("n = 1")
    ).body
    assert [m["seq"] for m in chosen["messages"]] == [text["seq"]]
    bad = call(broker, "GET", "/api/destinations/queue:look/messages?selector=" + quote("n ="))
    expect_error(bad, 400, "invalid-selector")
    expect_error(call(broker, "GET", "/api/destinations/queue:absent/messages"), 404)
    send(broker, "topic:browsed", "x")
    expect_error(call(broker, "GET", "/api/destinations/topic:browsed/messages"), 400)


def test_delete_one_message(broker: Broker) -> None:
    send(broker, "queue:pick", "one", "two")
    seqs = [
        m["seq"]
        for m in call(broker, "GET", "/api/destinations/queue:pick/messages").body["messages"]
    ]
    path = f"/api/destinations/queue:pick/messages/{seqs[0]}"
    assert call(broker, "DELETE", path).body == {"deleted": 1}
    assert "not waiting" in expect_error(call(broker, "DELETE", path), 404)
    expect_error(call(broker, "DELETE", "/api/destinations/queue:pick/messages/x1"), 400)
    with broker.connect() as conn, conn.session() as session:
        received = session.consumer("queue:pick").receive(DEADLINE)
        assert received is not None
        assert received.body == b"two"


def test_move_sends_waiting_messages_to_another_destination(broker: Broker) -> None:
    with broker.connect() as conn, conn.session() as session:
        for n in range(4):
            session.send("queue:from", f"m{n}", properties={"n": n})
    call(broker, "POST", "/api/destinations", {"address": "queue:to"})
    moved = call(
        broker,
        "POST",
        "/api/destinations/queue:from/move",
        {"to": "queue:to", "selector": "n >= 2"},
    )
    assert moved.body["kind"] == "move"
    done = job_done(broker, moved)
    assert (done["state"], done["moved"], done["to"], done["remaining"]) == (
        "done",
        2,
        "queue:to",
        2,
    )
    one = call(broker, "POST", "/api/destinations/queue:from/move", {"to": "queue:to", "limit": 1})
    assert job_done(broker, one)["moved"] == 1
    with broker.connect() as conn, conn.session() as session:
        consumer = session.consumer("queue:to")
        got = [consumer.receive(DEADLINE) for _ in range(3)]
        assert [m.body for m in got if m is not None] == [b"m2", b"m3", b"m0"]
    assert call(broker, "GET", "/api/destinations/queue:from").body["depth"] == 1
    expect_error(call(broker, "POST", "/api/destinations/queue:from/move", {}), 400)
    expect_error(  # no such source (a target that does not exist is made)
        call(broker, "POST", "/api/destinations/queue:nowhere/move", {"to": "queue:to"}), 404
    )
    expect_error(
        call(broker, "POST", "/api/destinations/queue:from/move", {"to": "queue:from"}), 400
    )
    expect_error(
        call(broker, "POST", "/api/destinations/queue:from/move", {"to": "queue:to", "seqs": [-1]}),
        400,
    )


def test_retry_puts_dead_letters_back_where_they_came_from(broker: Broker) -> None:
    send(broker, "queue:work", "poison")
    with broker.connect() as conn, conn.session(ack="client") as session:
        received = session.consumer("queue:work").receive(DEADLINE)
        assert received is not None
        received.nack(requeue=False)
    dlq = quote("queue:__sys__deadLetter")

    def dead() -> list[dict[str, Any]]:
        page = call(broker, "GET", f"/api/destinations/{dlq}/messages").body
        return [m for m in page["messages"] if m["body"] == "poison"]

    (letter,) = until(dead, "the dead letter")
    retried = job_done(
        broker, call(broker, "POST", f"/api/destinations/{dlq}/retry", {"seqs": [letter["seq"]]})
    )
    assert (retried["state"], retried["moved"], retried["to"], retried["left"]) == (
        "done",
        1,
        {"queue:work": 1},
        0,
    )
    with broker.connect() as conn, conn.session() as session:
        back = session.consumer("queue:work").receive(DEADLINE)
        assert back is not None
        assert back.body == b"poison"
        assert "chute_reason" not in back.properties
    assert dead() == []
    nothing = call(broker, "POST", f"/api/destinations/{dlq}/retry", raw=b"")
    assert job_done(broker, nothing)["moved"] == 0


# -- clients ----------------------------------------------------------------------------


def test_connections_are_listed_and_closed(broker: Broker) -> None:
    conn = broker.connect(client_id="doomed")
    try:
        listed = call(broker, "GET", "/api/connections").body["connections"]
        (mine,) = [c for c in listed if c["client_id"] == "doomed"]
        assert (mine["id"], mine["user"], mine["protocol"]) == (
            conn.connection_id,
            "admin",
            "native",
        )
        assert all(c["protocol"] != "http" for c in listed)  # the API's own are left out
        closed = call(broker, "DELETE", f"/api/connections/{mine['id']}")
        assert (closed.status, closed.body) == (204, None)
        with pytest.raises((ChuteError, ConnectError, OSError)):
            conn.stat()
    finally:
        conn.close()
    expect_error(call(broker, "DELETE", f"/api/connections/{mine['id']}"), 404)


def test_consumers_and_subscriptions(broker: Broker) -> None:
    with broker.connect(client_id="subscriber") as conn, conn.session() as session:
        session.consumer("topic:news", subscription="reader", durable=True)
        session.consumer("queue:jobs", selector="urgent = TRUE")
        jobs = call(broker, "GET", "/api/consumers?address=queue:jobs").body["consumers"]
        assert [(c["address"], c["selector"]) for c in jobs] == [("queue:jobs", "urgent = TRUE")]
        every = call(broker, "GET", "/api/consumers").body["consumers"]
        assert {"queue:jobs", "topic:news"} <= {c["address"] for c in every}
        subs = call(broker, "GET", "/api/subscriptions").body["subscriptions"]
        (reader,) = [s for s in subs if s["name"] == "reader"]
        assert (reader["topic"], reader["client_id"], reader["consumers"]) == (
            "topic:news",
            "subscriber",
            1,
        )
    expect_error(call(broker, "GET", "/api/consumers?address=queue:never"), 404)


def test_prepared_transactions_are_committed_and_rolled_back(broker: Broker) -> None:
    with chute.connect(broker.url, login=VIEWER[0], passcode=VIEWER[1]) as conn:
        for xid, body in (("xa-commit", "committed"), ("xa-rollback", "rolled back")):
            with conn.session(transacted=True) as session:
                session.send("queue:xa", body)
                session.prepare(xid)
    prepared = call(broker, "GET", "/api/transactions").body["prepared"]
    assert {"viewer/xa-commit", "viewer/xa-rollback"} <= set(prepared)  # another user's
    ok = call(broker, "POST", "/api/transactions/viewer/xa-commit/commit")
    assert (ok.status, ok.body) == (204, None)
    ok = call(broker, "POST", "/api/transactions/viewer%2Fxa-rollback/rollback")
    assert ok.status == 204
    expect_error(call(broker, "POST", "/api/transactions/viewer/xa-commit/commit"), 404)
    expect_error(call(broker, "POST", "/api/transactions/viewer/xa-commit/rollback"), 404)
    messages = call(broker, "GET", "/api/destinations/queue:xa/messages").body["messages"]
    assert [m["body"] for m in messages] == ["committed"]


def test_cursors_are_listed(broker: Broker) -> None:
    send(broker, "queue:spark", "row")
    with broker.connect() as conn:
        conn.cursor_open("queue:spark", "reader", lease_ms=60_000)
        cursors = call(broker, "GET", "/api/cursors").body["cursors"]
        (cursor,) = [c for c in cursors if c["address"] == "queue:spark"]
        assert cursor["name"] == "reader"
        assert cursor["lease"]["lease_ms"] == 60_000


def test_an_api_without_users_lets_loopback_do_everything_but_not_a_rebound_host(
    tmp_path: Path,
) -> None:
    http = free_port()
    srv = start_server(tmp_path, "--http-port", str(http))
    try:
        open_broker = Broker(srv, http)
        assert call(open_broker, "GET", "/api/overview", auth=None).status == 200
        rebound = call(
            open_broker, "GET", "/api/overview", auth=None, headers={"Host": "evil.example"}
        )
        assert "loopback" in expect_error(rebound, 403, "host-not-allowed")
    finally:
        assert srv.stop() == 0, srv.output
