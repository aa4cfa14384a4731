"""The admin API's rates of a stream: what was appended to it per second."""

from __future__ import annotations

from chute.admin.rates import RateSampler
from chute.core.operations.stats import stream_stats
from chute.message import Message

from ..core.helpers import make_broker


class Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_streams_enqueued_rate_is_what_was_appended() -> None:
    broker = make_broker()
    clock = Seconds()
    sampler = RateSampler(lambda: broker, clock)
    broker.destination("stream:s", create=True)
    sampler.tick()
    for _ in range(8):
        broker.send("stream:s", Message(b"x"))
    clock.now += 2.0
    rates = sampler.rates("stream:s", stream_stats(broker.streams["stream:s"]))
    assert rates == {"enqueued": 4.0, "delivered": 0.0, "acked": 0.0}
