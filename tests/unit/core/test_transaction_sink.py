"""A commit's record sink is reached through the broker, which never replaces its store;
the rules naming a consumer's subscription (core/rules/subscriptions.py)."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.topic import SubscriptionKind
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.subscriptions import consumer_key
from chute.core.rules.transaction import Gathering
from chute.errors import ConsumerError

from .helpers import RecordingStore, make_broker, msg


def test_a_commit_gathers_through_broker_store_and_the_store_stays() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    assert broker.store is store
    assert broker.gathering is None
    broker.destination("queue:q")
    store.calls.clear()
    seen: list[object] = []
    with broker.atomically():
        seen.append(broker.store)
        broker.send("queue:q", msg(b"a"))
        with broker.atomically():  # a nested use joins the outer gathering
            seen.append(broker.store)
            broker.send("queue:q", msg(b"b"))
        assert store.calls == []  # nothing reached the store yet
    [gathering, nested] = seen
    assert isinstance(gathering, Gathering)
    assert nested is gathering
    assert broker.store is store
    assert broker.gathering is None
    assert broker.admission.store is store
    assert store.kinds() == ["commit"]
    [(_, ops)] = store.calls
    assert [op.message.body for op in ops] == [b"a", b"b"]


def test_a_commit_gathers_even_when_it_fails() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    broker.destination("queue:q")
    store.calls.clear()

    def fail() -> None:
        with broker.atomically():
            broker.send("queue:q", msg(b"a"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert broker.gathering is None
    assert broker.store is store
    assert store.kinds() == ["commit"]  # memory changed, so the store follows


def test_a_transacted_session_commits_through_one_gathering() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send("queue:q", msg(b"a"))
    tx.send("queue:q", msg(b"b"))
    store.calls.clear()
    tx.commit()
    assert store.kinds() == ["commit"]
    assert broker.gathering is None
    assert broker.store is store


@pytest.mark.parametrize(
    ("name", "durable", "shared", "client_id", "expected"),
    [
        ("s", True, False, "app", ("durable:app.s", SubscriptionKind.DURABLE)),
        ("s", True, True, "app", ("durable-shared:s", SubscriptionKind.DURABLE)),
        ("s", True, True, None, ("durable-shared:s", SubscriptionKind.DURABLE)),
        ("s", False, True, None, ("shared:topic:t.s", SubscriptionKind.SHARED)),
        (None, False, False, None, ("nondurable:c1.7", SubscriptionKind.NON_DURABLE)),
    ],
)
def test_consumer_key_names_the_subscription(
    name: str | None,
    durable: bool,
    shared: bool,
    client_id: str | None,
    expected: tuple[str, SubscriptionKind],
) -> None:
    key = consumer_key(
        "topic:t", "c1.7", name=name, durable=durable, shared=shared, client_id=client_id
    )
    assert key == expected


@pytest.mark.parametrize(
    ("name", "durable", "shared", "client_id", "says"),
    [
        (None, True, False, "app", "needs a subscription name"),
        ("s", True, False, None, "needs a client id"),
        (None, False, True, None, "shared subscription needs a subscription name"),
    ],
)
def test_consumer_key_refuses_what_cannot_be_named(
    name: str | None, durable: bool, shared: bool, client_id: str | None, says: str
) -> None:
    with pytest.raises(ConsumerError, match=says):
        consumer_key(
            "topic:t", "c1.7", name=name, durable=durable, shared=shared, client_id=client_id
        )
