"""Address rules (DESIGN.md "Addresses")."""

from __future__ import annotations

import pytest

from chute.core.model.address import (
    DEAD_LETTER,
    EXPIRED,
    Address,
    Kind,
    canonical,
    check_name,
    parse,
    user_queue,
)
from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import InvalidAddress

from .helpers import Recorder, msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("queue:orders", "queue:orders"),
        ("topic:prices", "topic:prices"),
        ("/queue/orders", "queue:orders"),
        ("/topic/prices", "topic:prices"),
        ("orders", "queue:orders"),
        ("a.b-c_d:e", "queue:a.b-c_d:e"),
        ("queue:" + "x" * 200, "queue:" + "x" * 200),
    ],
)
def test_addresses_parse_to_their_canonical_form(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert str(parse(text)) == expected


def test_parse_gives_kind_and_name() -> None:
    assert parse("/topic/a.b") == Address(Kind.TOPIC, "a.b")
    assert parse("x") == Address(Kind.QUEUE, "x")
    assert parse("x").is_queue
    assert not parse("topic:x").is_queue


@pytest.mark.parametrize(
    "bad",
    [
        "a/b",
        "queue:a/b",
        "/queue/a/b",
        "..",
        "queue:..",
        "a..b",
        "",
        "queue:",
        "topic:",
        "/queue/",
        "x" * 201,
        "queue:" + "x" * 201,
        "a b",
        "queue: x",
        "tab\there",
        "new\nline",
        "é",
        "a*b",
    ],
)
def test_bad_names_are_invalid_addresses(bad: str) -> None:
    with pytest.raises(InvalidAddress):
        parse(bad)


def test_the_error_names_the_rules() -> None:
    with pytest.raises(InvalidAddress, match=r"1-200 characters"):
        check_name("a/b")


def test_a_long_bad_name_is_shortened_in_the_error() -> None:
    with pytest.raises(InvalidAddress) as info:
        check_name("/" * 500)
    assert len(str(info.value)) < 300


def test_non_string_address_is_invalid() -> None:
    with pytest.raises(InvalidAddress):
        parse(42)


def test_temporary_and_login_addresses_are_recognised() -> None:
    assert parse("queue:__tmp__.c1.1").is_temporary
    assert not parse("topic:__tmp__.c1.1").is_temporary
    assert not parse("queue:q").is_temporary
    assert parse(user_queue("alice")).login == "alice"
    assert user_queue("alice") == "queue:__user__.alice"
    assert parse("queue:q").login is None
    assert parse("topic:__user__.alice").login is None


def test_a_login_that_breaks_the_rules_has_no_queue() -> None:
    with pytest.raises(InvalidAddress):
        user_queue("bob/../etc")


def test_system_destinations_exist_from_the_start(broker: Broker) -> None:
    assert DEAD_LETTER == "queue:__sys__deadLetter"
    assert EXPIRED == "queue:__sys__expired"
    assert DEAD_LETTER in broker.queues
    assert EXPIRED in broker.queues


def test_the_broker_refuses_bad_addresses_and_accepts_every_spelling(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    with pytest.raises(InvalidAddress):
        s.send("a/b", msg())
    with pytest.raises(InvalidAddress):
        s.consumer(1, "queue:..", Recorder())
    s.send("/queue/x", msg(b"1"))
    s.send("x", msg(b"2"))
    s.send("queue:x", msg(b"3"))
    assert [e.message.body for e in looking.browse(broker, "queue:x")] == [b"1", b"2", b"3"]
    assert broker.destination("/queue/x") is broker.destination("queue:x")


@pytest.mark.parametrize(
    "typo", ["qeueu:orders", "Topic:news", "QUEUE:x", "queu:x", "tpoic:x", "queues:x"]
)
def test_a_mistyped_kind_is_refused_not_made_a_queue(typo: str) -> None:
    with pytest.raises(InvalidAddress, match="looks like a mistyped"):
        parse(typo)


@pytest.mark.parametrize("name", ["orders:eu", "a.b:c", "q:x", "quest:x", "v2:orders"])
def test_a_colon_after_other_text_is_still_a_name(name: str) -> None:
    assert parse(name) == Address(Kind.QUEUE, name)
