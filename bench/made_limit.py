"""What a make refused at ``max_destinations`` costs the broker's loop, and what a
filtered page of destinations costs, in the core (no sockets).

    python -m bench.made_limit                 # 10,000 made destinations, all holding a message
    python -m bench.made_limit --made 20000 --attempts 5000

A client that keeps making new destinations at a full broker is refused each time;
``refused_ms`` is the mean cost of one refusal (the broker looks for unused
destinations to reclaim at most once a second, so most refusals only compare a
time). ``filtered_page_ms`` is one page of the admin API's ``contains`` filter over
every destination (what the console's filter box asks). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import time

from chute.core.model.settings import SettingsResolver
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.core.rules.destinations import Limits
from chute.errors import DestinationFull
from chute.message import Message
from chute.store.memory import MemoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--made", type=int, default=10_000)
    parser.add_argument("--attempts", type=int, default=2_000)
    args = parser.parse_args()
    broker = Broker(MemoryStore(), SettingsResolver({}), limits=Limits(max_total=args.made))
    broker.recover()
    session = BrokerConnection(broker).session()
    for i in range(args.made):
        session.send(f"queue:full.{i:06}", Message.create(b"x"))
    start = time.perf_counter()
    for i in range(args.attempts):
        try:
            session.send(f"queue:more.{i}", Message.create(b"x"))
        except DestinationFull:
            pass
        else:
            raise AssertionError("a make past the limit was accepted")
    refused = (time.perf_counter() - start) / args.attempts
    start = time.perf_counter()
    pages = 20
    for _ in range(pages):
        looking.stats_page(broker, limit=1000, contains="full.0042")
    filtered = (time.perf_counter() - start) / pages
    print(
        json.dumps(
            {
                "made": args.made,
                "attempts": args.attempts,
                "refused_ms": round(refused * 1000, 3),
                "filtered_page_ms": round(filtered * 1000, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
