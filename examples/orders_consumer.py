"""Prints the demo's results: every window the job publishes on ``topic:order-stats`` (per
region) and ``topic:order-totals`` (every region, from the job's second query).

python examples/orders_consumer.py --url chute://127.0.0.1:5445 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import time

import chute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="chute://127.0.0.1:5445")
    parser.add_argument("--seconds", type=float, default=0, help="stop after (0 = forever)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.seconds if args.seconds else None
    printed = 0
    with chute.connect(args.url) as conn, conn.session() as session:
        by_region = session.consumer("topic:order-stats")
        overall = session.consumer("topic:order-totals")
        while deadline is None or time.monotonic() < deadline:
            for consumer, region in ((by_region, True), (overall, False)):
                message = consumer.receive(timeout=0.5)
                if message is None:
                    continue
                stat = json.loads(message.body)
                name = stat["region"] if region else "ALL (10 s)"
                print(
                    f"{stat['window']}  {name:<10} {stat['orders']:>6} orders  "
                    f"{stat['total']:>12,.2f}",
                    flush=True,
                )
                printed += 1
    if not printed:
        print(
            f"no window closed within {args.seconds:g} s: a window is published once the "
            "job's watermark passes its end (5 s of orders, then 5 s more), and Spark's "
            "first batch can take a while to start on a busy machine; run it longer "
            "(DEMO_SECONDS=60, the default)",
            flush=True,
        )


if __name__ == "__main__":
    main()
