"""The Spark executor's CPU per message: CursorPage bytes to an Arrow batch, in one thread.

    python -m bench.page_to_arrow              # 7 runs of each case, medians
    python -m bench.page_to_arrow --runs 3 --pages 4

No broker and no Spark: pages of 4096 messages with 1 KiB bodies are encoded in
memory by the real encoder (the bytes a broker answers a CursorFetch with), then
turned into ``pyarrow.RecordBatch`` es of ``ARROW_SCHEMA`` two ways:

* ``before``: decode the packet into ``(seq, Message)`` pairs
  (:func:`chute.protocol.wire.decode_body`) and build the batch from them
  (:func:`chute.spark.schema.to_record_batch`);
* ``after``: the columnar path the source reads with
  (:func:`chute.spark.pages.page_batch`).

Cases: ``plain`` (no properties, no correlation id), ``mixed`` (one message in
four has a correlation id, a type and four properties of different types), and
``properties`` (every message has them). Each run converts every page once; a
run's rate is messages / seconds, and the JSON gives the median rate and the
range per case and path. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any, Final

from chute.message import Int, Long, Message, Short
from chute.protocol.packets import CursorPage, Header, PacketType
from chute.protocol.spec import HEADER_SIZE
from chute.protocol.wire import decode_body, encode_packet
from chute.spark.pages import page_batch
from chute.spark.schema import to_record_batch

PAGE: Final = 4096
BODY: Final = 1024
ADDRESS: Final = "stream:orders"
CASES: Final = {"plain": 0.0, "mixed": 0.25, "properties": 1.0}


def message(rng: random.Random, seq: int, rich: bool) -> Message:
    body = rng.randbytes(BODY)
    if not rich:
        return Message(body, id=f"ID:bench-{seq}", timestamp=1_700_000_000_000 + seq)
    return Message(
        body,
        id=f"ID:bench-{seq}",
        timestamp=1_700_000_000_000 + seq,
        correlation_id=f"order-{seq % 977}",
        type="order",
        priority=seq % 10,
        properties={
            "region": rng.choice(("eu", "us", "apac")),
            "amount": Int(rng.randrange(1, 10_000)),
            "customer": Long(rng.randrange(1 << 40)),
            "retries": Short(seq % 3),
        },
    )


def pages(share: float, count: int, seed: int = 7) -> list[bytes]:
    """``count`` CursorPage bodies of :data:`PAGE` messages, ``share`` of them rich."""
    rng = random.Random(seed)
    out: list[bytes] = []
    seq = 1
    for _ in range(count):
        entries = []
        for _ in range(PAGE):
            entries.append((seq, message(rng, seq, rng.random() < share)))
            seq += 1
        packet = encode_packet(CursorPage(seq, tuple(entries)))
        out.append(packet[HEADER_SIZE:])
    return out


def before(body: bytes) -> Any:
    page = decode_body(PacketType.CURSOR_PAGE, Header(), body)
    assert isinstance(page, CursorPage)
    return to_record_batch(ADDRESS, page.messages)


def after(body: bytes) -> Any:
    return page_batch(ADDRESS, body)


def rate(convert: Callable[[bytes], Any], bodies: list[bytes]) -> float:
    """Messages per second converting every page once."""
    start = time.perf_counter()
    rows = 0
    for body in bodies:
        rows += convert(body).num_rows
    return rows / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pages", type=int, default=4, help="pages per run")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for case, share in CASES.items():
        bodies = pages(share, args.pages)
        if not before(bodies[0]).equals(after(bodies[0])):
            raise SystemExit(f"{case}: the two paths disagree")
        runs: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.runs):  # interleaved, so both see the same machine
            runs["before"].append(rate(before, bodies))
            runs["after"].append(rate(after, bodies))
        median = {k: statistics.median(v) for k, v in runs.items()}
        results[case] = {
            **{
                f"{k}_msgs_per_s": {
                    "median": round(median[k]),
                    "min": round(min(v)),
                    "max": round(max(v)),
                }
                for k, v in runs.items()
            },
            "speedup": round(median["after"] / median["before"], 2),
        }
    print(
        json.dumps(
            {
                "page_messages": PAGE,
                "body_bytes": BODY,
                "pages_per_run": args.pages,
                "runs": args.runs,
                "target_msgs_per_s": 400_000,
                "cases": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
