"""A tiny in-memory broker speaking the native protocol over a real socket, for client tests.

Queues only (a topic address is just another queue), credit-based delivery,
and a few magic addresses to provoke errors:

* ``queue:full``: every send is refused with ``destination-full`` (as a response,
  or for a one-way send as an Error targeted at the session);
* ``queue:kill``: the broker answers a send with a connection-level Error and closes;
* ``queue:silent``: requests are never answered.

``Move`` and ``DeadLetterRetry`` are refused as a broker older than them refuses
them: a connection-level ``unknown-packet-type`` Error, and the connection closes.

Browsing answers pages of at most ``BROWSE_PAGE`` messages; statistics are
one page, ``{"queues": {address: depth}}``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field

from chute.content import decode_content, encode_content
from chute.errors import RemoteProtocolError
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.splice import encode_deliver
from chute.protocol.wire import encode_packet

BROWSE_PAGE = 2
"""The fake's browse pages are this small, so a client's walk takes several."""


@dataclass
class FakeConsumer:
    id: int
    address: str
    credit: int
    next_seq: int = 1
    unacked: dict[int, bytes] = field(default_factory=dict)


@dataclass
class FakeConnection:
    sock: socket.socket
    codec: PacketCodec = field(default_factory=PacketCodec)
    consumers: dict[int, FakeConsumer] = field(default_factory=dict)
    reads: int = 0


class FakeBroker:
    """Serves on 127.0.0.1:<port> until :meth:`close`. Records every packet received."""

    def __init__(self, heartbeat_ms: int = 0) -> None:
        self.heartbeat_ms = heartbeat_ms
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.url = f"chute://127.0.0.1:{self.port}"
        self.queues: dict[str, deque[bytes]] = {}
        self.received: list[tuple[p.Header, p.Packet]] = []
        self.connections: list[FakeConnection] = []
        self.lock = threading.RLock()
        self._threads: list[threading.Thread] = []
        self._closed = False
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            conn.sock.close()

    def packets(self, cls: type) -> list[p.Packet]:
        with self.lock:
            return [x for _, x in self.received if isinstance(x, cls)]

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            conn = FakeConnection(sock)
            self.connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: FakeConnection) -> None:
        try:
            while True:
                data = conn.sock.recv(1 << 16)
                conn.reads += 1
                conn.codec.receive_data(data)
                try:
                    items = conn.codec.next_packets()
                except RemoteProtocolError as exc:
                    self._write(conn, encode_packet(p.Error(exc.error_code, exc.reason)))
                    return
                out: list[bytes] = []
                with self.lock:
                    for header, packet in items:
                        self.received.append((header, packet))
                        if not self._handle(conn, header, packet, out):
                            self._write(conn, b"".join(out))
                            conn.sock.shutdown(socket.SHUT_RDWR)
                            return
                    self._pump(conn, out)
                self._write(conn, b"".join(out))
                if not data:
                    return
        except OSError:
            return
        finally:
            conn.sock.close()

    @staticmethod
    def _write(conn: FakeConnection, data: bytes) -> None:
        if data:
            conn.sock.sendall(data)

    def _handle(  # noqa: PLR0915 - one match over the packet types
        self, conn: FakeConnection, header: p.Header, packet: p.Packet, out: list[bytes]
    ) -> bool:
        corr = header.correlation_id

        def reply(answer: p.Packet) -> None:
            if corr:
                out.append(encode_packet(answer, corr))

        match packet:
            case p.Connect():
                if p.negotiate_version(packet.min_version, packet.max_version) is None:
                    out.append(encode_packet(p.Error("unsupported-version", "no"), corr))
                    return False
                if packet.login == "bad":
                    out.append(encode_packet(p.Error("authentication-failed", "bad login"), corr))
                    return False
                reply(p.Connected(1, "fake-1", self.heartbeat_ms, 1 << 20))
            case p.Send():
                if packet.address == "queue:kill":
                    out.append(encode_packet(p.Error("shutting-down", "broker going away")))
                    return False
                if packet.address == "queue:silent":
                    return True
                if packet.address == "queue:full":
                    error = p.Error("destination-full", "queue:full is full")
                    out.append(
                        encode_packet(error, corr, target_id=0 if corr else header.target_id)
                    )
                    return True
                assert packet.content is not None
                self.queues.setdefault(packet.address, deque()).append(packet.content)
                reply(p.Ok())
            case p.ConsumerOpen():
                conn.consumers[packet.consumer_id] = FakeConsumer(
                    packet.consumer_id, packet.address, packet.prefetch
                )
                reply(p.Ok())
            case p.ConsumerClose():
                consumer = conn.consumers.pop(packet.consumer_id, None)
                if consumer is not None:
                    queue = self.queues.setdefault(consumer.address, deque())
                    queue.extendleft(reversed(list(consumer.unacked.values())))
                reply(p.Ok())
            case p.Ack():
                consumer = conn.consumers[packet.consumer_id]
                consumer.credit += packet.credit
                for seq in list(consumer.unacked):
                    if seq == packet.seq or (packet.cumulative and seq <= packet.seq):
                        del consumer.unacked[seq]
            case p.Credit():
                conn.consumers[packet.consumer_id].credit += packet.credit
            case p.BrowseFetch():  # pages of at most BROWSE_PAGE, numbered from 1
                queue = self.queues.get(packet.address, deque())
                before = packet.before or len(queue) + 1
                end = min(before - 1, packet.after + (packet.max_messages or BROWSE_PAGE))
                messages = tuple(
                    (i, decode_content(queue[i - 1], 0, len(queue[i - 1])))
                    for i in range(packet.after + 1, end + 1)
                )
                reply(p.BrowsePage(end, before, end + 1 >= before, messages))
            case p.StatFetch():
                queues = {k: len(v) for k, v in self.queues.items()}
                reply(p.StatPage(json.dumps({"queues": queues})))
            case p.TempQueue():
                reply(p.TempQueueCreated("queue:__tmp__.fake-1.1"))
            case p.Move() | p.DeadLetterRetry():  # too new: refused as an older broker would
                tag = (
                    p.PacketType.MOVE
                    if isinstance(packet, p.Move)
                    else p.PacketType.DEAD_LETTER_RETRY
                )
                reason = f"unknown packet type {int(tag)}"
                out.append(encode_packet(p.Error("unknown-packet-type", reason)))
                return False
            case p.Ping():
                out.append(encode_packet(p.Pong(), corr))
            case p.Disconnect():
                reply(p.Ok())
                return False
            case _:
                reply(p.Ok())
        return True

    def _pump(self, conn: FakeConnection, out: list[bytes]) -> None:
        for consumer in conn.consumers.values():
            queue = self.queues.get(consumer.address)
            while queue and consumer.credit > 0:
                content = queue.popleft()
                seq = consumer.next_seq
                consumer.next_seq += 1
                consumer.credit -= 1
                consumer.unacked[seq] = content
                out.append(encode_deliver(consumer.id, seq, 0, False, 1000, 0, content))

    def push(self, address: str, body: bytes) -> None:
        """Put a message on a queue as if a producer had sent it (delivered on next read)."""
        with self.lock:
            self.queues.setdefault(address, deque()).append(
                encode_content(Message(body, id="pushed", persistent=False))
            )
