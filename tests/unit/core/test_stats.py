"""Statistics in pages (chute.core.operations.stats): any number of destinations, a page at
a time."""

from __future__ import annotations

from typing import Any

import pytest

from chute.core.model.topic import SubscriptionKind, Topic
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection, connect
from chute.core.operations.stats import STAT_PAGE
from chute.core.rules.access import Access, Action, Role, User
from chute.core.rules.broker import Broker
from chute.errors import InvalidAddress

from .helpers import msg


def pages(broker: Broker, **asked: Any) -> list[dict[str, Any]]:
    found = [looking.stats_page(broker, **asked)]
    while found[-1]["next"] is not None:
        found.append(looking.stats_page(broker, after=found[-1]["next"], **asked))
    return found


def addresses(found: list[dict[str, Any]]) -> list[str]:
    return [d["address"] for page in found for d in page["destinations"]]


def test_pages_cover_every_destination_once_in_address_order(broker: Broker) -> None:
    made = [f"queue:q{i:03}" for i in range(45)] + ["topic:t1", "topic:t0"]
    for address in made:
        broker.destination(address, create=True)
    found = pages(broker, limit=10)
    everything = sorted([*made, *(d["address"] for d in looking.stats(broker)["destinations"])])
    assert addresses(found) == sorted(set(everything))  # queues first, then topics
    assert all(len(page["destinations"]) <= 10 for page in found)
    assert all(page["connections"] == 0 for page in found)  # the broker's figures each time


def test_a_pattern_keeps_what_it_names(broker: Broker) -> None:
    for name in ("orders.eu", "orders.us", "ordersx", "other"):
        BrokerConnection(broker).session().send(f"queue:{name}", msg(b"x"))
    assert addresses(pages(broker, pattern="orders.*", limit=1)) == [
        "queue:orders.eu",
        "queue:orders.us",
    ]
    [one] = pages(broker, pattern="queue:ordersx")
    assert [(d["address"], d["depth"]) for d in one["destinations"]] == [("queue:ordersx", 1)]
    assert addresses(pages(broker, pattern="queue:nothing")) == []
    assert broker.find("queue:nothing") is None  # looking creates nothing
    with pytest.raises(InvalidAddress):
        looking.stats_page(broker, pattern="queue:no spaces")


def test_the_broker_clamps_the_page(broker: Broker) -> None:
    for i in range(STAT_PAGE + 3):
        broker.destination(f"queue:many.{i}", create=True)
    first = looking.stats_page(broker, limit=10 * STAT_PAGE)
    assert len(first["destinations"]) == STAT_PAGE
    assert first["next"] is not None


def test_a_topic_lists_its_subscriptions(broker: Broker) -> None:
    topic = broker.destination("topic:news", create=True)
    assert isinstance(topic, Topic)
    broker.subscriptions.create("news-a", topic, SubscriptionKind.DURABLE, name="a")
    BrokerConnection(broker).session().send("topic:news", msg(b"x"))
    [page] = pages(broker, pattern="topic:news")
    [news] = page["destinations"]
    assert (news["depth"], [s["name"] for s in news["subscriptions"]]) == (1, ["news-a"])


def test_a_user_pages_through_only_what_they_may_see(broker: Broker) -> None:
    for i in range(20):
        broker.destination(f"queue:mine.{i:02}", create=True)
        broker.destination(f"queue:theirs.{i:02}", create=True)
    mine = Role("mine", {Action.BROWSE: ("queue:mine.*",)})
    broker.access = Access({"alice": User("alice", "pw", ("mine",))}, {"mine": mine})
    alice = connect(broker, "alice", "pw")
    seen: list[str] = []
    after = ""
    while True:
        page = alice.stats_page(after=after, limit=7)
        seen += [d["address"] for d in page["destinations"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == [f"queue:mine.{i:02}" for i in range(20)]
