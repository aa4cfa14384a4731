"""The floor under a synchronous persistent send on this machine; prints JSON.

A producer that waits for each message's fsync pays, per message, one socket
round trip between two processes plus one write and one sync on the disk, however
good the broker is. This measures those with no broker at all, in the same run:

* ``fsync_probe``: 128-byte appends + ``fsync`` from one thread (how
  notes/baselines.md and ``bench.native`` measure "the fsyncs/s this disk does");
* ``disk_only``: what a journal does per message (``pwrite`` 1 KiB into a
  pre-allocated, zeroed file + ``fdatasync``), one thread;
* ``ideal_round_trip``: a blocking-socket client sends 1 KiB, waits for a 20-byte
  answer; the server, an asyncio (uvloop) process, does ``pwrite`` + ``fdatasync``
  before answering. No parsing, no routing, no bookkeeping: the best any Python
  broker could do for one synchronous producer here;
* ``ideal_with_consumer``: the same, with a consumer as ``bench.native``'s ``sync``
  runs one: the server also writes each message to a consumer process's socket once
  it is synced, and writes each 20-byte ack the consumer sends back into the file
  (no sync). Still no broker logic: the best any Python broker could do for
  ``bench.native``'s ``sync`` figure here;
* ``chute_bare_client``: a real ``chute serve`` with its journal, driven by a
  client with no threads (a socket and the sans-IO protocol): the broker's own
  cost, without the blocking client's reader thread.

Compare ``bench.native``'s ``sync`` figure with ``ideal_round_trip`` and
``chute_bare_client``: what is left between them is the broker's and the
client's own work.

    python -m bench.sync_floor [--seconds 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import tempfile
import time
from typing import Any, cast

from bench.broker import start_broker
from bench.native import fsync_probe
from chute.client.protocol import ClientProtocol
from chute.protocol.packets import Packet

_BODY = b"x" * 1024
_ANSWER = b"y" * 20
_FILE_SIZE = 256 << 20


def _zeroed(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    chunk = bytes(1 << 20)
    for offset in range(0, _FILE_SIZE, len(chunk)):
        os.pwrite(fd, chunk, offset)
    os.fsync(fd)
    return fd


def disk_only(directory: str, seconds: float) -> int:
    """``pwrite`` + ``fdatasync`` per message into a pre-allocated file, per second."""
    fd = _zeroed(os.path.join(directory, "disk-only"))
    try:
        n, offset = 0, 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and offset < _FILE_SIZE - 4096:
            os.pwrite(fd, _BODY, offset)
            os.fdatasync(fd)
            offset += len(_BODY)
            n += 1
        return round(n / (time.perf_counter() - started))
    finally:
        os.close(fd)


def _server(directory: str, port_out: Any) -> None:
    try:
        import uvloop  # optional, as in chute.server.process

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    fd = _zeroed(os.path.join(directory, "ideal"))
    position = [0]
    consumers: list[asyncio.Transport] = []

    def record(data: bytes) -> None:
        os.pwrite(fd, data, position[0] % (_FILE_SIZE - 4096))
        position[0] += len(data)

    class Stored(asyncio.Protocol):
        """A producer's connection; one whose first byte is ``C`` is a consumer's."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)
            self.buffered = 0
            self.role = b""

        def data_received(self, data: bytes) -> None:
            if not self.role:
                self.role, data = data[:1], data[1:]
                if self.role == b"C":
                    consumers.append(self.transport)
            if self.role == b"C":  # acks: recorded, not synced
                record(data)
                return
            self.buffered += len(data)
            while self.buffered >= len(_BODY):  # one answer per whole message
                self.buffered -= len(_BODY)
                record(data[: len(_BODY)])
                os.fdatasync(fd)
                self.transport.write(_ANSWER)
                for consumer in consumers:
                    consumer.write(_BODY)

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Stored, "127.0.0.1", 0)
        port_out.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(serve())


def _consumer(port: int, ready: Any) -> None:
    """Reads the ideal server's messages and acks each with 20 bytes."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"C")
        ready.set()
        buffered = 0
        while chunk := sock.recv(65536):
            buffered += len(chunk)
            acks, buffered = divmod(buffered, len(_BODY))
            if acks:
                sock.sendall(_ANSWER * acks)


def ideal_round_trip(directory: str, seconds: float, *, consumer: bool = False) -> int:
    """Synchronous sends/s against a server that only writes, syncs and answers (and,
    with ``consumer``, passes each message on to a consumer process and records its ack)."""
    ctx = mp.get_context("spawn")
    port_out = ctx.Queue()
    server = ctx.Process(target=_server, args=(directory, port_out), daemon=True)
    server.start()
    reader = None
    try:
        port = port_out.get(timeout=60)
        if consumer:
            ready = ctx.Event()
            reader = ctx.Process(target=_consumer, args=(port, ready), daemon=True)
            reader.start()
            ready.wait(60)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(b"P")
            n = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                sock.sendall(_BODY)
                got = 0
                while got < len(_ANSWER):
                    chunk = sock.recv(64)
                    if not chunk:
                        raise ConnectionError("the ideal server went away")
                    got += len(chunk)
                n += 1
            return round(n / (time.perf_counter() - started))
    finally:
        server.kill()
        server.join(10)
        if reader is not None:
            reader.kill()
            reader.join(10)


def chute_bare_client(directory: str, seconds: float) -> int:
    """Synchronous persistent sends/s to a real broker from a client without threads."""
    proc, url = start_broker(os.path.join(directory, "broker"))
    try:
        host, port = url.removeprefix("chute://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            proto = ClientProtocol()

            def call(corr: int) -> Packet:
                sock.sendall(proto.data_to_send())
                while (result := proto.result(corr)) is None:
                    proto.receive_data(sock.recv(65536))
                return result

            hello = proto.connect(None, None, None, 0)
            hello.parse(call(proto.start(hello)))
            session = proto.open_session("auto", False)
            n = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                call(proto.send(session, "queue:sync-floor", _BODY))
                n += 1
            return round(n / (time.perf_counter() - started))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as directory:
        for _ in range(args.runs):
            run: dict[str, float] = {
                "fsync_probe_per_s": fsync_probe(directory, args.seconds),
                "disk_only_per_s": disk_only(directory, args.seconds),
                "ideal_round_trip_per_s": ideal_round_trip(directory, args.seconds),
                "ideal_with_consumer_per_s": ideal_round_trip(
                    directory, args.seconds, consumer=True
                ),
                "chute_bare_client_per_s": chute_bare_client(directory, args.seconds),
            }
            probe = run["fsync_probe_per_s"]
            run["ideal_to_probe"] = round(run["ideal_round_trip_per_s"] / probe, 2)
            run["ideal_with_consumer_to_probe"] = round(run["ideal_with_consumer_per_s"] / probe, 2)
            run["chute_bare_client_to_probe"] = round(run["chute_bare_client_per_s"] / probe, 2)
            runs.append(run)
    report: dict[str, Any] = {"runs": runs}
    for key in runs[0]:
        report[f"median_{key}"] = statistics.median(r[key] for r in runs)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
