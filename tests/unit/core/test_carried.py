"""Carried messages: what a bridge brings from another messaging system keeps that
system's send time and delivery count (``BrokerSession.send(..., carried=True)``)."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import TransactionError
from chute.message import Message

from .helpers import START, FakeClock, Recorder, msg, restart

SENT_AT = START - 60_000  # a minute before the broker's clock


def carried(body: bytes, delivery_count: int = 0) -> Message:
    message = msg(body)
    message.timestamp = SENT_AT
    message.delivery_count = delivery_count
    return message


def test_a_carried_message_keeps_its_timestamp(broker: Broker, clock: FakeClock) -> None:
    session = BrokerConnection(broker).session()
    session.send("queue:q", carried(b"from a file"), carried=True)
    session.send("queue:q", carried(b"from a client"))
    r = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r)
    assert [e.message.timestamp for e in r.entries] == [SENT_AT, clock.now]


def test_deliveries_counted_elsewhere_count_here_and_mark_it_redelivered(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    session.send("queue:q", carried(b"delivered twice before", delivery_count=2), carried=True)
    session.send("queue:q", carried(b"never delivered"), carried=True)
    r = Recorder()
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "queue:q", r)
    first, second = r.entries
    assert (first.redelivered, first.delivery_count) == (True, 3)
    assert (second.redelivered, second.delivery_count) == (False, 1)


def test_every_subscription_of_a_topic_gets_a_carried_message_redelivered(
    broker: Broker,
) -> None:
    readers = [Recorder(), Recorder()]
    for i, r in enumerate(readers):
        BrokerConnection(broker).session(AckMode.CLIENT).consumer(i, "topic:news", r)
    BrokerConnection(broker).session().send("topic:news", carried(b"again", 1), carried=True)
    for r in readers:
        [entry] = r.entries
        assert (entry.redelivered, entry.delivery_count, entry.message.timestamp) == (
            True,
            2,
            SENT_AT,
        )


def test_a_carried_message_is_still_redelivered_after_a_restart(broker: Broker) -> None:
    BrokerConnection(broker).session().send("queue:q", carried(b"again", 1), carried=True)
    recovered = restart(broker)
    r = Recorder()
    BrokerConnection(recovered).session(AckMode.CLIENT).consumer(1, "queue:q", r)
    [entry] = r.entries
    assert (entry.redelivered, entry.delivery_count, entry.message.timestamp) == (
        True,
        2,
        SENT_AT,
    )


def test_a_transacted_session_refuses_a_carried_message(broker: Broker) -> None:
    session = BrokerConnection(broker).session(transacted=True)
    with pytest.raises(TransactionError):
        session.send("queue:q", carried(b"x"), carried=True)
    session.commit()
    assert looking.browse(broker, "queue:q") == []
