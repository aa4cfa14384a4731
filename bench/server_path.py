"""The broker's per-message path in one process, without sockets or clients; prints JSON.

Drives real :class:`~chute.server.native.NativeConnection` objects through fake
transports: a producer connection is fed pre-encoded ``Send`` packets in 256 KiB
reads, a consumer connection acks cumulatively with credit as a client would.
What it measures is the broker's own CPU cost per message (decode, route,
deliver-encode, ack), which the end-to-end benchmark cannot separate from the
clients sharing the same two cores.

    python -m bench.server_path                    # median of 5 runs
    python -m bench.server_path --profile out.prof # cProfile one run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import struct
import time

from chute.config import ServerConfig
from chute.content import encode_content
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.spec import HEADER_SIZE
from chute.protocol.splice import encode_send
from chute.protocol.wire import encode_packet
from chute.server.app import BrokerServer
from chute.server.native import NativeConnection
from chute.server.process import tune_gc
from chute.store.memory import MemoryStore
from tests.memory_transport import MemoryTransport, settle

HEAD = struct.Struct(">IBB")
SEQ = struct.Struct(">Q")


def connect(server: BrokerServer) -> tuple[NativeConnection, MemoryTransport]:
    conn = NativeConnection(server)
    transport = MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(encode_packet(p.Connect(), correlation_id=1))
    conn.data_received(encode_packet(p.SessionOpen(1, p.SessionAckMode.AUTO), callback_id=1))
    transport.written.clear()
    return conn, transport


def count_deliveries(data: bytes) -> tuple[int, int]:
    """Walk packet headers only (the consumer's decoding is not the broker's cost)."""
    n = last = pos = 0
    while pos < len(data):
        length, _version, ptype = HEAD.unpack_from(data, pos)
        if ptype == p.PacketType.DELIVER:
            n += 1
            (last,) = SEQ.unpack_from(data, pos + HEADER_SIZE)
        pos += length + 4
    return n, last


def run(count: int, size: int, loop: asyncio.AbstractEventLoop) -> float:
    server = BrokerServer(ServerConfig(), MemoryStore())
    producer, _ = connect(server)
    consumer, out = connect(server)
    consumer.data_received(
        encode_packet(p.ConsumerOpen(1, 2, "queue:path", prefetch=1000), correlation_id=2)
    )
    message = Message.create(b"x" * size, persistent=False)
    packet = encode_send(1, b"queue:path", encode_content(message))
    per_read = max(1, 262144 // len(packet))
    chunk = packet * per_read
    received = 0
    start = time.process_time()
    for _ in range(count // per_read):
        producer.data_received(chunk)
        settle(loop, producer, 1)  # its turns, and the flushes they scheduled
        data = b"".join(out.written)
        out.written.clear()
        n, last = count_deliveries(data)
        if n:
            received += n
            consumer.data_received(encode_packet(p.Ack(2, last, True, n), target_id=2))
    elapsed = time.process_time() - start
    assert received == (count // per_read) * per_read, received
    return elapsed / received * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", help="write a cProfile of one run to this file")
    args = parser.parse_args()
    tune_gc()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if args.profile:
        cProfile.runctx("run(args.count, args.size, loop)", globals(), locals(), args.profile)
        return
    runs = [run(args.count, args.size, loop) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "workload": "server per-message path: decode Send, route, encode Deliver, ack",
                "count": args.count,
                "size": args.size,
                "us_per_msg_runs": [round(r, 2) for r in runs],
                "median_us_per_msg": round(statistics.median(runs), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
