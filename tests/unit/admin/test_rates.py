"""The admin API's rates: per second over the last few seconds, from samples."""

from __future__ import annotations

from chute.admin.rates import INTERVAL, PER_TICK, RateSampler
from chute.core.operations import looking
from chute.core.rules.broker import Broker
from chute.message import Message

from ..core.helpers import make_broker


class Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sampler_for(broker: Broker) -> tuple[RateSampler, Seconds]:
    clock = Seconds()
    return RateSampler(lambda: broker, clock), clock


def stats(broker: Broker, address: str) -> dict[str, object]:
    (dest,) = looking.stats(broker, address)["destinations"]
    return dest  # type: ignore[no-any-return]


def test_a_rate_is_what_went_through_since_a_sample_over_the_time_since() -> None:
    broker = make_broker()
    sampler, clock = sampler_for(broker)
    broker.destination("queue:q", create=True)
    sampler.tick()
    for _ in range(10):
        broker.send("queue:q", Message(b"x"))
    clock.now += 2.0
    rates = sampler.rates("queue:q", stats(broker, "queue:q"))
    assert rates == {"enqueued": 5.0, "delivered": 0.0, "acked": 0.0}


def test_no_rate_before_a_sample_a_second_old() -> None:
    broker = make_broker()
    sampler, clock = sampler_for(broker)
    broker.destination("queue:q", create=True)
    assert sampler.rates("queue:q", stats(broker, "queue:q"))["enqueued"] == 0.0
    sampler.tick()
    broker.send("queue:q", Message(b"x"))
    clock.now += INTERVAL / 2
    assert sampler.rates("queue:q", stats(broker, "queue:q"))["enqueued"] == 0.0


def test_the_oldest_sample_within_the_window_is_the_baseline() -> None:
    broker = make_broker()
    sampler, clock = sampler_for(broker)
    broker.destination("queue:q", create=True)
    for _ in range(10):  # one message a second for ten seconds, sampled each second
        sampler.tick()
        broker.send("queue:q", Message(b"x"))
        clock.now += 1.0
    rates = sampler.rates("queue:q", stats(broker, "queue:q"))
    assert rates["enqueued"] == 1.0


def test_a_destination_made_again_starts_over() -> None:
    broker = make_broker()
    sampler, clock = sampler_for(broker)
    broker.destination("queue:q", create=True)
    for _ in range(5):
        broker.send("queue:q", Message(b"x"))
    sampler.tick()
    broker.destinations.delete("queue:q")
    broker.destination("queue:q", create=True)
    sampler.tick()  # a new round: it is sampled again, its counters lower
    broker.send("queue:q", Message(b"x"))
    clock.now += 1.0
    assert sampler.rates("queue:q", stats(broker, "queue:q"))["enqueued"] == 1.0


def test_a_tick_samples_a_bounded_number_and_goes_round() -> None:
    broker = make_broker()
    sampler, clock = sampler_for(broker)
    for n in range(PER_TICK + 10):
        broker.destination(f"queue:q{n:05d}", create=True)
    sampler.tick()
    last = f"queue:q{PER_TICK + 9:05d}"
    broker.send(last, Message(b"x"))
    clock.now += 1.0
    assert sampler.rates(last, stats(broker, last))["enqueued"] == 0.0  # not sampled yet
    sampler.tick()  # the rest of the round
    broker.send(last, Message(b"x"))
    clock.now += 1.0
    assert sampler.rates(last, stats(broker, last))["enqueued"] == 1.0


def test_nothing_is_sampled_before_the_broker_is_ready() -> None:
    sampler = RateSampler(lambda: None)
    sampler.tick()  # no broker yet: nothing to do, no error
