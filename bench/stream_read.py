"""Reading a stream's offset range whole, as the Spark source does: how fast the broker serves it.

Starts ``chute serve`` on a fresh journal, sends ``--count`` persistent
messages of ``--size`` bytes to ``stream:bench`` in transactions of
``--tx``, then reads ``[first, head)`` whole ``--runs`` times with the
Python client's ``cursor_read`` (a ``CursorFetch`` without a cursor, pages of
4,096 messages / 4 MiB). Each stream keeps only its newest 8 MiB in memory, so
nearly every page is read back from the journal.

Per run: the wall time (msgs/s), the broker's CPU time over the read (its
process's user + system time: msgs/s per broker CPU second is what the broker
alone could serve), the client's CPU time (this process, all its threads) and
its time decoding the ``CursorPage`` answers through the codec table (0 if the
client decodes its pages another way). Prints JSON: every run and the medians.

    python -m bench.stream_read [--count 100000] [--runs 5]
    python -m bench.stream_read --pythonpath DIR    # the broker from another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.broker import start_broker
from chute.client import blocking
from chute.protocol import wire
from chute.protocol.packets import PacketType

STREAM = "stream:bench"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


class DecodeClock:
    """Times the client's decoding of CursorPage bodies (wraps the codec in the table)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        codec = wire.CODECS[PacketType.CURSOR_PAGE]
        decode = codec.decode

        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return decode(*args)
            finally:
                self.seconds += time.perf_counter() - t0

        wire.CODECS[PacketType.CURSOR_PAGE] = codec._replace(decode=timed)


def fill(url: str, count: int, size: int, tx_size: int) -> None:
    with blocking.connect(url, timeout=600) as conn, conn.session(transacted=True) as tx:
        for i in range(count):
            tx.send(STREAM, f"{i:08d}".encode().ljust(size, b"."))
            if i % tx_size == tx_size - 1:
                tx.commit()
        tx.commit()


def read_all(url: str, pid: int, clock: DecodeClock, count: int) -> dict[str, float]:
    with blocking.connect(url, timeout=600) as conn:
        first, head = conn.cursor_open(STREAM)
        clock.seconds = 0.0
        cpu0 = cpu_seconds(pid)
        own0 = time.process_time()
        t0 = time.perf_counter()
        got = 0
        expected = first
        for page in conn.cursor_read(
            STREAM, None, first, head, page_messages=4096, page_bytes=4 << 20
        ):
            if page[0][0] != expected:
                raise RuntimeError(f"page starts at {page[0][0]}, expected {expected}")
            got += len(page)
            expected = page[-1][0] + 1
        wall = time.perf_counter() - t0
        client_cpu = time.process_time() - own0
        cpu1 = cpu_seconds(pid)
        user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        cpu = user + system
    if got != count:
        raise RuntimeError(f"read {got} messages, expected {count}")
    return {
        "seconds": round(wall, 3),
        "msgs_per_s": round(got / wall),
        "broker_cpu_s": round(cpu, 3),
        "broker_sys_s": round(system, 3),
        "broker_msgs_per_cpu_s": round(got / cpu) if cpu else 0,
        "client_cpu_s": round(client_cpu, 3),
        "client_decode_s": round(clock.seconds, 3),
        "wall_minus_decode_msgs_per_s": round(got / max(wall - clock.seconds, 1e-9)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tx", type=int, default=1000, help="messages per transaction")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pythonpath", help="run the broker from this checkout instead")
    args = parser.parse_args()
    clock = DecodeClock()
    data_dir = tempfile.mkdtemp(prefix="chute-stream-read-")
    proc, url = start_broker(data_dir, pythonpath=args.pythonpath)
    try:
        t0 = time.perf_counter()
        fill(url, args.count, args.size, args.tx)
        fill_rate = args.count / (time.perf_counter() - t0)
        runs = [read_all(url, proc.pid, clock, args.count) for _ in range(args.runs)]
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    keys = [k for k in runs[0] if k != "seconds"]
    print(
        json.dumps(
            {
                "broker": args.pythonpath or "this checkout",
                "count": args.count,
                "size": args.size,
                "fill_msgs_per_s": round(fill_rate),
                "runs": runs,
                "median": {k: statistics.median(r[k] for r in runs) for k in keys},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
