"""Compacted streams: what compaction costs the broker's loop, and the disk it frees.

In process, over a real journal (``sync = "never"``: the CPU, not the disk): sends
``--count`` messages of ``--size`` bytes over ``--keys`` keys to a compacted stream,
running the broker's compaction step every ``--every`` messages as its sweep would,
then restarts on the same journal and runs the step until one message per key is left
(what was recovered is read back from the journal). The same sends to a stream
without compaction give the appending cost it adds.

Times are the CPU time of the broker's thread (the loop's cost, whatever else the machine runs).
Prints JSON: µs per message appended (compacted and not), the live steps' total and
longest (ms), the steps after the restart (how many, longest), the journal's bytes
after the sends and at the end (after a reclaim pass).

    python -m bench.compaction [--count 100000] [--keys 1000] [--size 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

from chute.core.model.settings import Cleanup, DestinationSettings, SettingsResolver
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.store.journal import Journal

STREAM = "stream:bench"


def journal_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


def open_broker(directory: str, cleanup: Cleanup, segment: int) -> tuple[Broker, Journal]:
    journal = Journal(directory, sync="never", segment_size=segment)
    settings = SettingsResolver({STREAM: DestinationSettings(cleanup=cleanup)})
    broker = Broker(journal, settings, clock=lambda: int(time.time() * 1000))
    broker.recover()
    return broker, journal


def run(args: argparse.Namespace, cleanup: Cleanup) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="chute-bench-compaction-")
    try:
        broker, journal = open_broker(directory, cleanup, args.segment)
        session = BrokerConnection(broker).session()
        pad = b"." * args.size
        steps: list[float] = []
        appending = 0.0
        for start in range(0, args.count, args.every):
            messages = [
                Message.create(pad, key=f"k{i % args.keys}")
                for i in range(start, min(args.count, start + args.every))
            ]
            began = time.thread_time()
            for message in messages:
                session.send(STREAM, message)
            appending += time.thread_time() - began
            began = time.thread_time()
            broker.compaction.sweep([broker.streams[STREAM]], broker.store, broker.clock())
            steps.append(time.thread_time() - began)
        journal.flush()
        written = journal_bytes(directory)
        out: dict[str, Any] = {
            "append_us_per_msg": round(appending / args.count * 1e6, 2),
            "live_steps_ms": round(sum(steps) * 1000, 1),
            "live_step_max_ms": round(max(steps) * 1000, 1),
            "kept_live": broker.streams[STREAM].count,
            "journal_after_sends_mib": round(written / 2**20, 1),
        }
        journal.close()
        if cleanup is Cleanup.COMPACT:
            broker, journal = open_broker(directory, cleanup, args.segment)
            stream = broker.streams[STREAM]
            after: list[float] = []
            while stream.count > args.keys and len(after) < 10_000:
                began = time.thread_time()
                broker.compaction.sweep([stream], broker.store, broker.clock())
                after.append(time.thread_time() - began)
            journal.flush()
            journal.reclaim()
            out |= {
                "restart_steps": len(after),
                "restart_step_max_ms": round(max(after, default=0) * 1000, 1),
                "kept": stream.count,
                "journal_end_mib": round(journal_bytes(directory) / 2**20, 1),
            }
            journal.close()
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--segment", type=int, default=4 << 20)
    args = parser.parse_args()
    print(
        json.dumps(
            {
                "count": args.count,
                "keys": args.keys,
                "size": args.size,
                "compact": run(args, Cleanup.COMPACT),
                "delete": run(args, Cleanup.DELETE),
            }
        )
    )


if __name__ == "__main__":
    main()
