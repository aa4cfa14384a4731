"""One synchronous persistent send through the broker's own code, no sockets; prints JSON.

A real :class:`~chute.server.native.NativeConnection` over a fake transport, on a
real journal (``sync = always``, a temporary directory on this disk), with the
server's loop (uvloop when installed) run in this process: each round feeds one
1 KiB persistent ``Send`` with a correlation id and runs the loop until the
``Ok`` is written, as one producer that waits for each send makes the broker
do. No socket, no client: what is left is the broker's path from the packet to
its answer (decode, route, journal append, the inline write and ``fdatasync``,
the callback, the answer's encoding).

Per send, the median of ``--runs``: wall µs, and the process's user and system
CPU µs (``getrusage``: the loop and the journal's threads). In the same run,
the floor under it: ``pwrite`` of 1 KiB + ``fdatasync`` into a zeroed file, the
same two system calls on the same disk with no Python around them.

``--profile FILE`` writes a cProfile of one run, and the JSON then lists the
functions with the most own time per send (µs): the budget, line by line.

    python -m bench.sync_path                      # 5,000 sends, 3 runs
    python -m bench.sync_path --profile sync.prof  # and where each µs goes
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import resource
import statistics
import tempfile
import threading
import time
from typing import Any

from chute.config import ServerConfig
from chute.content import encode_content
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.splice import encode_send
from chute.protocol.wire import encode_packet
from chute.server.app import BrokerServer
from chute.server.native import NativeConnection
from chute.server.process import tune_gc
from chute.store.journal import Journal
from tests.memory_transport import MemoryTransport

BODY = 1024
_FILE = 64 << 20


class Answers(MemoryTransport):
    """A transport that also sets :attr:`answered` when the broker writes."""

    answered: asyncio.Event | None = None

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.answered is not None:
            self.answered.set()


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # as chute.server.process does when it is installed

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def broker_sends(directory: str, count: int) -> dict[str, float]:
    """Per-send wall, user and system µs of ``count`` synchronous sends."""
    loop = _loop()
    asyncio.set_event_loop(loop)
    journal = Journal(os.path.join(directory, f"journal-{time.monotonic_ns()}"))
    server = BrokerServer(ServerConfig(), journal)
    server.loop = loop  # what start() sets
    server.loop_thread = threading.get_ident()
    conn = NativeConnection(server)
    out = Answers()
    conn.connection_made(out)  # type: ignore[arg-type]
    conn.data_received(encode_packet(p.Connect(), correlation_id=1))
    conn.data_received(encode_packet(p.SessionOpen(1, p.SessionAckMode.AUTO), callback_id=1))
    content = encode_content(Message.create(b"x" * BODY))
    packets = [encode_send(1, b"queue:sync-path", content, 0, 2 + i) for i in range(count)]

    async def rounds() -> tuple[float, float, float]:
        out.take()
        answered = out.answered = asyncio.Event()
        wall, (user, system) = time.perf_counter(), _cpu()
        for packet in packets:
            conn.data_received(packet)
            await answered.wait()  # the Ok: written once the sync called back
            answered.clear()
            out.written.clear()
        after_user, after_system = _cpu()
        return time.perf_counter() - wall, after_user - user, after_system - system

    try:
        wall, user, system = loop.run_until_complete(rounds())
    finally:
        conn.connection_lost(None)
        journal.close()
        loop.close()
    return {
        "wall_us": round(wall / count * 1e6, 1),
        "user_us": round(user / count * 1e6, 1),
        "system_us": round(system / count * 1e6, 1),
    }


def disk_floor(directory: str, count: int) -> dict[str, float]:
    """``pwrite`` 1 KiB + ``fdatasync`` per round into a zeroed file."""
    path = os.path.join(directory, "floor")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        zeros = bytes(1 << 20)
        for offset in range(0, _FILE, len(zeros)):
            os.pwrite(fd, zeros, offset)
        os.fsync(fd)
        body = b"x" * BODY
        wall, (user, system) = time.perf_counter(), _cpu()
        for i in range(count):
            os.pwrite(fd, body, (i * BODY) % (_FILE - BODY))
            os.fdatasync(fd)
        after_user, after_system = _cpu()
        wall = time.perf_counter() - wall
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "wall_us": round(wall / count * 1e6, 1),
        "user_us": round((after_user - user) / count * 1e6, 1),
        "system_us": round((after_system - system) / count * 1e6, 1),
    }


def budget(profile: str, count: int, top: int = 25) -> list[dict[str, Any]]:
    """The functions with the most own time, in µs per send."""
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename.split("/chute/", 1)[-1] if "/chute/" in filename else filename
        rows.append(
            {
                "function": f"{where}:{line}({name})",
                "calls_per_send": round(calls / count, 2),
                "own_us": round(own / count * 1e6, 2),
                "cumulative_us": round(cumulative / count * 1e6, 2),
            }
        )
    rows.sort(key=lambda r: -r["own_us"])
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", help="also write a cProfile of one run to this file")
    args = parser.parse_args()
    tune_gc()
    report: dict[str, Any] = {"count": args.count, "body_bytes": BODY}
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as directory:
        broker = [broker_sends(directory, args.count) for _ in range(args.runs)]
        floor = [disk_floor(directory, args.count) for _ in range(args.runs)]
        for name, runs in (("broker", broker), ("pwrite_fdatasync", floor)):
            report[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            report[f"{name}_runs"] = runs
        report["broker_minus_floor_us"] = {
            k: round(report["broker"][k] - report["pwrite_fdatasync"][k], 1)
            for k in report["broker"]
        }
        if args.profile:
            cProfile.runctx(
                "broker_sends(directory, args.count)", globals(), locals(), args.profile
            )
            report["budget_profiled"] = budget(args.profile, args.count)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
