"""Synthetic order events for the Spark demo: JSON bodies on ``stream:orders``, each keyed
by its region (which picks the stream's partition, when it has several).

python examples/orders_producer.py --url chute://127.0.0.1:5445 --rate 200 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import random
import time

import chute

REGIONS = ("eu-west", "eu-north", "us-east", "us-west", "ap-south")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="chute://127.0.0.1:5445")
    parser.add_argument("--destination", default="stream:orders")
    parser.add_argument("--rate", type=float, default=200.0, help="orders per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long (0 = forever)")
    args = parser.parse_args()
    rng = random.Random()  # noqa: S311 - synthetic data, not secrets
    sent = 0
    start = time.monotonic()
    with chute.connect(args.url) as conn, conn.session(transacted=True) as session:
        while args.seconds <= 0 or time.monotonic() - start < args.seconds:
            region = rng.choice(REGIONS)
            order = {
                "order_id": f"o-{sent}",
                "region": region,
                "amount": round(rng.lognormvariate(3.5, 0.8), 2),
                "ts": time.time(),
            }
            # keyed by region: a region's orders go to one partition of the stream, in order
            session.send(args.destination, json.dumps(order), type="order", key=region)
            sent += 1
            if sent % 50 == 0:
                session.commit()  # one journal sync per 50 orders
                ahead = sent / args.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)  # pacing the producer to --rate
        session.commit()
    print(f"producer: sent {sent} orders to {args.destination}", flush=True)


if __name__ == "__main__":
    main()
