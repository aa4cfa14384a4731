"""The broker's STOMP per-message path in one process, without sockets or clients; prints JSON.

The STOMP twin of :mod:`bench.server_path`: real
:class:`~chute.server.stomp.StompConnection` objects over fake transports. A
producer connection is fed pre-built SEND frames (the bytes ``stompbench``
sends: ``destination``, ``content-length``, a 1 KiB body) in 256 KiB reads;
consumer connections take the MESSAGE frames written to their transport and,
in ``client-individual`` mode, answer each read with one ACK frame per message,
as stompbench's consumer does. Only the broker's calls are timed (process CPU
time, so a loaded machine changes the figures little); building and scanning the
clients' bytes is not. Scenarios, after the rows of ``python -m bench.stomp``:

``auto``        row a: transient, one ``ack:auto`` consumer on a queue
``individual``  row b: persistent, ``client-individual`` with an ACK per message
                and a ``receipt`` every 100 SENDs (the in-memory store: no fsync)
``fanout``      row e: transient, four ``ack:auto`` subscribers on a topic;
                the figure is per message *delivered*

    python -m bench.stomp_path                         # every scenario, median of 3 runs
    python -m bench.stomp_path --scenario auto --runs 5
    python -m bench.stomp_path --scenario auto --profile out.prof   # cProfile one run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import re
import statistics
import time
from typing import Any

from chute.config import ServerConfig
from chute.server.app import BrokerServer
from chute.server.process import tune_gc
from chute.server.stomp import StompConnection
from chute.store.memory import MemoryStore
from tests.memory_transport import MemoryTransport, settle

SCENARIOS = ("auto", "individual", "fanout")
READ_SIZE = 262_144
_ACK_ID = re.compile(rb"\nack:([^\n]*)\n")
_MESSAGE_ID = re.compile(rb"\nmessage-id:([^\n]*)\n")


def frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in headers.items())]
    return "\n".join(lines).encode() + b"\n\n" + body + b"\0"


def connect(server: BrokerServer, version: str) -> tuple[StompConnection, MemoryTransport]:
    conn = StompConnection(server)
    transport = MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(frame("CONNECT", {"accept-version": version, "host": "localhost"}))
    assert transport.take().startswith(b"CONNECTED\n")
    return conn, transport


class Run:
    """One scenario's broker, clients and CPU clock."""

    def __init__(
        self, scenario: str, size: int, loop: asyncio.AbstractEventLoop, version: str = "1.2"
    ) -> None:
        self.loop = loop
        self.v12 = version == "1.2"
        self.server = BrokerServer(ServerConfig(), MemoryStore())
        self.server.loop = loop
        self.individual = scenario == "individual"
        destination = "/topic/path" if scenario == "fanout" else "/queue/path"
        self.producer, self.producer_out = connect(self.server, version)
        consumers = 4 if scenario == "fanout" else 1
        self.consumers = [connect(self.server, version) for _ in range(consumers)]
        ack = "client-individual" if self.individual else "auto"
        for n, (conn, out) in enumerate(self.consumers):
            conn.data_received(
                frame(
                    "SUBSCRIBE",
                    {
                        "id": str(n),
                        "destination": destination,
                        "ack": ack,
                        "receipt": "subscribed",
                        "prefetch-count": "1000",
                        "activemq.prefetchSize": "1000",
                    },
                )
            )
            assert out.take().startswith(b"RECEIPT\n")
        headers = {"destination": destination, "content-length": str(size)}
        headers["persistent"] = "true" if self.individual else "false"
        self.send = frame("SEND", headers, b"x" * size)
        self.send_receipt = frame("SEND", {**headers, "receipt": "r"}, b"x" * size)
        self.cpu = 0.0
        self.received = 0

    def broker(self, conn: StompConnection, data: bytes) -> None:
        """Feed ``data`` to ``conn`` and run the loop until it settles, on the clock."""
        start = time.process_time()
        conn.data_received(data)
        settle(self.loop, conn, 4)  # its turns; flushes, credit given back, their flushes
        self.cpu += time.process_time() - start

    def consume(self) -> int:
        """Each consumer's MESSAGE frames since last time (its ACKs fed back); how many."""
        got = 0
        for conn, out in self.consumers:
            data = out.take()
            if not data:
                continue
            if self.individual and self.v12:
                ids = _ACK_ID.findall(data)
                got += len(ids)
                acks = b"".join(b"ACK\nid:%s\n\n\0" % i for i in ids)
                self.broker(conn, acks)
            elif self.individual:  # STOMP 1.0/1.1: ACK names the message-id
                ids = _MESSAGE_ID.findall(data)
                got += len(ids)
                acks = b"".join(b"ACK\nmessage-id:%s\nsubscription:0\n\n\0" % i for i in ids)
                self.broker(conn, acks)
            else:
                got += data.count(b"\0MESSAGE\n") + data.startswith(b"MESSAGE\n")
        self.received += got
        return got

    def go(self, count: int) -> float:
        """Send ``count`` messages (rounded to whole reads); µs of broker CPU per delivery."""
        per_read = max(1, READ_SIZE // len(self.send))
        reads = max(1, count // per_read)
        sent = 0
        for _ in range(reads):
            frames = []
            for _ in range(per_read):
                sent += 1
                receipt = self.individual and sent % 100 == 0
                frames.append(self.send_receipt if receipt else self.send)
            self.broker(self.producer, b"".join(frames))
            self.producer_out.take()  # receipts
            self.consume()
        expected = sent * len(self.consumers)
        for _ in range(1000):
            if self.received >= expected:
                break
            self.broker(self.producer, b"\n")  # a heart-beat: lets the loop run
            if not self.consume():
                break
        assert self.received == expected, (self.received, expected)
        return self.cpu / self.received * 1e6


def run(
    scenario: str, count: int, size: int, loop: asyncio.AbstractEventLoop, version: str = "1.2"
) -> float:
    return Run(scenario, size, loop, version).go(count)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    parser.add_argument("--count", type=int, default=100_000, help="messages sent per run")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--stomp-version",
        choices=("1.1", "1.2"),
        default="1.2",
        help="1.1: ACK frames name message-id and subscription instead of the ack id",
    )
    parser.add_argument("--profile", help="write a cProfile of one run to this file")
    args = parser.parse_args()
    tune_gc()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    if args.profile:
        scenario = scenarios[0]
        cProfile.runctx(
            "run(scenario, args.count, args.size, loop, args.stomp_version)",
            globals(),
            locals(),
            args.profile,
        )
        return
    results: dict[str, Any] = {}
    for scenario in scenarios:
        runs = [
            run(scenario, args.count, args.size, loop, args.stomp_version) for _ in range(args.runs)
        ]
        median = statistics.median(runs)
        results[scenario] = {
            "us_per_delivery_runs": [round(r, 2) for r in runs],
            "median_us_per_delivery": round(median, 2),
            "deliveries_per_cpu_second": round(1e6 / median),
        }
    print(
        json.dumps(
            {
                "workload": "STOMP server path: parse SEND, route, build MESSAGE, (ACK)",
                "count": args.count,
                "size": args.size,
                "stomp_version": args.stomp_version,
                "scenarios": results,
            }
        )
    )


if __name__ == "__main__":
    main()
