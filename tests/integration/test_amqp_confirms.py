"""Publisher confirms over a window: the publishes one sync covers are confirmed
together, with ``multiple``, not one ``basic.ack`` each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pamqp import commands, frame

from chute.amqp.codec import content

from .amqp_support import AmqpServer, serve
from .test_amqp_fuzz import Raw

WINDOW = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-confirms"))


def test_a_window_of_publishes_is_confirmed_by_a_few_multiple_acks(broker: AmqpServer) -> None:
    raw = Raw(broker.amqp_port).open()
    try:
        raw.method(1, commands.Confirm.Select())
        raw.read_method(commands.Confirm.SelectOk)
        raw.method(1, commands.Queue.Declare(queue="confirmed", durable=True))
        raw.read_method(commands.Queue.DeclareOk)
        publish = frame.marshal(commands.Basic.Publish(exchange="", routing_key="confirmed"), 1)
        one = publish + content(1, {"delivery_mode": 2}, b"x" * 1024, 131072)
        raw.send(one * WINDOW)  # the whole window at once, as a pipelining publisher does
        acks: list[commands.Basic.Ack] = []
        while not acks or acks[-1].delivery_tag < WINDOW:
            got = raw.read()
            assert got is not None, "closed before every publish was confirmed"
            assert not isinstance(got[1], commands.Basic.Nack)
            if isinstance(got[1], commands.Basic.Ack):
                acks.append(got[1])
        tags = [a.delivery_tag for a in acks]
        assert tags == sorted(tags)
        assert tags[-1] == WINDOW
        assert len(acks) <= 20, f"{len(acks)} acks for {WINDOW} publishes"
    finally:
        raw.close()
