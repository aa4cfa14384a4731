"""The admin API on streams, against a ``chute serve`` subprocess with users.

An operator sees a stream where they see queues and topics: listed, in
detail with its offsets and readers, browsed by offset, purged, deleted, made
with ``POST /api/destinations``. What only a queue allows (moving messages,
retrying dead letters, deleting one message) is a 400 that says what to do
instead. The chute client makes the state (messages, a reader) and checks
that what the API did really happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import chute
from chute.admin.openapi import document
from chute.errors import ChuteError

from .admin_calls import USERS, VIEWER, Broker, call, expect_error, quote, until
from .conftest import free_port, start_server

pytestmark = pytest.mark.acceptance

WRITER = ("writer", "writer-pw")
STREAM_USERS = f"""{USERS}
[users.writer]
password = "writer-pw"
roles = ["streams"]

[roles.streams]
send = ["*"]
consume = ["*"]
browse = ["stream:*"]
create = ["*"]
delete = ["stream:*"]
"""
"""The API's users (``admin`` manages everything, streams included: ``*`` reaches every
kind of destination) and a client that uses streams."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("admin-streams")
    config = tmp / "chute.toml"
    config.write_text(STREAM_USERS)
    http = free_port()
    srv = start_server(tmp, "--config", str(config), "--http-port", str(http))
    yield Broker(srv, http)
    assert srv.stop() == 0, srv.output


def connect(broker: Broker) -> chute.Connection:
    return chute.connect(broker.url, login=WRITER[0], passcode=WRITER[1])


def send(broker: Broker, address: str, *bodies: str) -> None:
    with connect(broker) as conn, conn.session() as session:
        for body in bodies:
            session.send(address, body)


@contextlib.contextmanager
def reading(broker: Broker, address: str, **kwargs: Any) -> Iterator[chute.Consumer]:
    """A consumer reading ``address`` (a stream) from ``offset``, open while in the block."""
    with connect(broker) as conn, conn.session() as session:
        yield session.consumer(address, **kwargs)


def detail(broker: Broker, address: str) -> dict[str, Any]:
    answer = call(broker, "GET", f"/api/destinations/{quote(address)}")
    assert answer.status == 200, answer
    body: dict[str, Any] = answer.body
    return body


def first_offset(broker: Broker, address: str) -> int:
    """The offset of the oldest message of ``address``, as a reader from ``first`` sees it."""
    with reading(broker, address, offset="first") as consumer:
        received = consumer.receive(timeout=10)
        assert received is not None
        return received.seq


def test_a_stream_is_listed_and_shown_with_its_offsets_and_readers(broker: Broker) -> None:
    address = "stream:api.ticks"
    send(broker, address, *(f"t{n}" for n in range(5)))
    first = first_offset(broker, address)

    (listed,) = call(broker, "GET", "/api/destinations?pattern=stream:*").body["destinations"]
    assert listed["address"] == address
    assert listed["kind"] == "stream"
    assert (listed["depth"], listed["enqueued"], listed["removed"]) == (5, 5, 0)
    assert (listed["first"], listed["head"]) == (first, first + 5)
    assert listed["bytes"] > 0
    assert set(listed["rates"]) == {"enqueued", "delivered", "acked"}

    with reading(broker, address, offset=first + 2, prefetch=1) as consumer:
        received = consumer.receive(timeout=10)
        assert received is not None
        assert (received.seq, received.text) == (first + 2, "t2")
        shown = until(lambda: (d := detail(broker, address))["readers"] and d, "a reader")
        (reader,) = shown["readers"]
        assert reader == {"position": first + 5, "consumers": 1}  # it read on to the head
        (consumer_row,) = shown["consumers_detail"]
        assert consumer_row["address"] == address
        assert consumer_row["prefetch"] == 1
        assert shown["consumers"] == 1
        assert shown["depth"] == 5  # reading removes nothing
    assert until(lambda: not detail(broker, address)["readers"], "the reader to go")


def test_a_stream_is_browsed_a_page_at_a_time_by_offset(broker: Broker) -> None:
    address = "stream:api.browse"
    send(broker, address, "a", "b", "c")
    first = first_offset(broker, address)
    path = f"/api/destinations/{quote(address)}/messages"

    answer = call(broker, "GET", f"{path}?limit=2")
    assert answer.status == 200, answer
    page = answer.body
    assert [(m["seq"], m["body"]) for m in page["messages"]] == [(first, "a"), (first + 1, "b")]
    assert page["done"] is False
    rest = call(broker, "GET", f"{path}?after={page['after']}&before={page['before']}").body
    assert [(m["seq"], m["body"]) for m in rest["messages"]] == [(first + 2, "c")]
    assert rest["done"] is True
    assert detail(broker, address)["depth"] == 3  # browsing consumed nothing


def test_posting_a_stream_address_makes_a_stream(broker: Broker) -> None:
    made = call(broker, "POST", "/api/destinations", {"address": "stream:api.made"})
    assert made.status == 201, made
    assert made.body == {"address": "stream:api.made", "created": True}
    again = call(broker, "POST", "/api/destinations", {"address": "stream:api.made"})
    assert (again.status, again.body["created"]) == (200, False)
    shown = detail(broker, "stream:api.made")
    assert (shown["kind"], shown["depth"], shown["readers"]) == ("stream", 0, [])

    send(broker, "stream:api.made", "kept", "for every reader")
    for _ in range(2):  # two readers from the start each get both: a log, not a queue
        with reading(broker, "stream:api.made", offset="first") as consumer:
            got = [consumer.receive(timeout=10) for _ in range(2)]
            assert [m.text for m in got if m is not None] == ["kept", "for every reader"]


def test_purging_a_stream_empties_it_and_its_offsets_go_on(broker: Broker) -> None:
    address = "stream:api.purged"
    send(broker, address, "x", "y", "z")
    head = detail(broker, address)["head"]

    purged = call(broker, "POST", f"/api/destinations/{quote(address)}/purge")
    assert (purged.status, purged.body) == (200, {"purged": 3})
    shown = detail(broker, address)
    assert (shown["depth"], shown["bytes"], shown["removed"]) == (0, 0, 3)
    assert shown["first"] == shown["head"] == head
    listed = call(broker, "GET", f"/api/destinations/{quote(address)}/messages").body
    assert listed["messages"] == []

    send(broker, address, "after")
    assert first_offset(broker, address) == head  # offsets never go back


def test_deleting_a_stream_closes_its_readers(broker: Broker) -> None:
    address = "stream:api.deleted"
    send(broker, address, "1", "2")
    with reading(broker, address, offset="first") as consumer:
        until(lambda: detail(broker, address)["readers"], "the reader")
        deleted = call(broker, "DELETE", f"/api/destinations/{quote(address)}")
        assert (deleted.status, deleted.body) == (200, {"deleted": 2})
        expect_error(call(broker, "GET", f"/api/destinations/{quote(address)}"), 404, "not-found")

        with pytest.raises(ChuteError, match="was deleted"):  # its reader is closed
            until(lambda: consumer.receive(timeout=0.2) and False, "the reader to be closed")


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("POST", "/move", {"to": "queue:api.elsewhere"}),
        ("POST", "/retry", {}),
        ("DELETE", "/messages/1", None),
    ],
)
def test_what_only_a_queue_allows_is_a_400_on_a_stream(
    broker: Broker, method: str, suffix: str, body: Any
) -> None:
    address = f"stream:api.kept.{method.lower()}.{suffix.split('/')[1]}"
    send(broker, address, "stays")
    send(broker, "queue:api.elsewhere", "seed")
    path = f"/api/destinations/{quote(address)}{suffix}"

    message = expect_error(call(broker, method, path, body), 400, "invalid-address")

    assert message.startswith(f"{address} is a stream")
    assert "purge it, or delete it" in message  # what one can do instead
    assert detail(broker, address)["depth"] == 1


def test_a_queue_moves_into_a_stream(broker: Broker) -> None:
    send(broker, "queue:api.into", "moved")
    send(broker, "stream:api.target", "already there")
    path = "/api/destinations/queue:api.into/move"
    moved = call(broker, "POST", path, {"to": "stream:api.target"})
    assert moved.status == 202, moved
    job = f"/api/moves/{moved.body['id']}"
    until(lambda: call(broker, "GET", job).body["state"] == "done", "the move's end")
    assert call(broker, "GET", job).body["moved"] == 1
    assert detail(broker, "stream:api.target")["depth"] == 2


def test_a_user_without_manage_sees_no_stream(broker: Broker) -> None:
    send(broker, "stream:api.private", "x")
    answer = call(broker, "GET", "/api/destinations/stream:api.private", auth=VIEWER)
    expect_error(answer, 403, "forbidden")
    purged = call(broker, "POST", "/api/destinations/stream:api.private/purge", auth=VIEWER)
    expect_error(purged, 403, "forbidden")
    listed = call(broker, "GET", "/api/destinations?pattern=stream:*", auth=VIEWER).body
    assert listed["destinations"] == []
    assert detail(broker, "stream:api.private")["depth"] == 1


def test_a_streams_rate_is_what_was_appended(broker: Broker) -> None:
    address = "stream:api.rated"

    def appending() -> float:
        send(broker, address, "tick")  # a message a poll, until a sample sees them
        rate: float = detail(broker, address)["rates"]["enqueued"]
        return rate

    assert until(appending, "a rate of appends") > 0


def test_the_document_describes_a_streams_fields() -> None:
    schemas = document()["components"]["schemas"]
    destination = schemas["Destination"]["properties"]
    assert "stream" in destination["kind"]["enum"]
    for name in ("first", "head", "removed", "readers"):
        assert destination[name]["description" if name != "readers" else "items"]
    assert destination["readers"]["items"] == {"$ref": "#/components/schemas/StreamReader"}
    assert set(schemas["StreamReader"]["required"]) == {"position", "consumers"}
