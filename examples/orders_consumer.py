"""Prints the demo's results: every window update the job publishes on ``topic:order-stats``.

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
    with chute.connect(args.url) as conn, conn.session() as session:
        consumer = session.consumer("topic:order-stats")
        while deadline is None or time.monotonic() < deadline:
            message = consumer.receive(timeout=1.0)
            if message is None:
                continue
            stat = json.loads(message.body)
            print(
                f"{stat['window']}  {stat['region']:<9} {stat['orders']:>6} orders  "
                f"{stat['total']:>12,.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
