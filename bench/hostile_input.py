"""The attacks of ``python -m bench.hostile`` that send badly rather than much: bodies
before login on the HTTP tunnel, frames begun after login and never finished, a
subscriber that never reads on a small disk, a flood of malformed requests for the
log, and a stray journal segment at start.

Each attack is a function ``(target, stop)`` run in its own process until ``stop``
is set; :class:`Setup` says what the broker it runs against needs (configuration,
a small disk, what to do to its data before it starts, and how to count what it
lost of that).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chute
from bench.broker import start_broker
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.wire import encode_packet

MIB = 1 << 20
USERS = """
[users.bystander]
password = "pw"
roles = ["admin"]
[users.nobody]
password = "pw"
roles = []
[users.writer]
password = "pw"
roles = ["writer"]
[roles.writer]
send = ["queue:big"]
create = ["queue:big"]
"""
"""Users for the attacks after login: ``nobody`` may do nothing, ``writer`` may send to
``queue:big``; the bystander is an admin."""


@dataclass(frozen=True)
class Target:
    """Where the broker under attack listens (picklable: it goes to the attack's process)."""

    port: int
    stomp: int
    http: int
    login: str | None = None  # the bystander's, when users are configured

    @property
    def url(self) -> str:
        return f"chute://127.0.0.1:{self.port}"

    def connect(self) -> chute.Connection:
        if self.login is None:
            return chute.connect(self.url)
        return chute.connect(self.url, login=self.login, passcode="pw")


@dataclass(frozen=True)
class Setup:
    """What an attack needs of its broker besides the common configuration."""

    config: str = ""  # appended to the configuration (keys of [server] first)
    users: bool = False  # USERS are configured; the bystander logs in
    disk: str | None = None  # the data directory is a tmpfs of this size
    prepare: Callable[[str, str], None] | None = None  # (data dir, config) before start
    lost: Callable[[Target], int] | None = None  # what the prepared data lost


def _sockets_pushing(socks: list[socket.socket], chunk: bytes, stop: Any) -> None:
    """Keep sending ``chunk`` on every socket that takes it, without blocking, until
    ``stop`` (a socket the broker closed is dropped)."""
    for s in socks:
        s.setblocking(False)
    while not stop.is_set() and socks:
        for s in list(socks):
            try:
                s.send(chunk)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                socks.remove(s)
                s.close()
        stop.wait(0.01)


# -- tunnel bodies before login --------------------------------------------------------------


def tunnel_bodies(t: Target, stop: Any) -> None:
    """100 HTTP tunnel sessions that never log in, each POSTing 15 MiB of a 16 MiB body."""
    socks = []
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", t.http), timeout=10) as s:
                s.sendall(
                    b"POST /chute HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-chute\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
            sid = json.loads(answer.split(b"\r\n\r\n", 1)[1])["session"]
            s = socket.create_connection(("127.0.0.1", t.http), timeout=10)
            s.sendall(
                f"POST /chute/{sid} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-chute\r\n"
                f"Chute-Seq: 1\r\nContent-Length: {16 * MIB}\r\n\r\n".encode()
            )
            socks.append(s)
        except (OSError, ValueError, KeyError, IndexError):
            continue
    sent = dict.fromkeys(socks, 0)
    chunk = b"\x00" * 65536
    for s in socks:
        s.setblocking(False)
    while not stop.is_set() and socks:
        for s in list(socks):
            if sent[s] >= 15 * MIB:
                continue
            try:
                sent[s] += s.send(chunk)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                socks.remove(s)
        stop.wait(0.01)
    stop.wait()


# -- frames begun after login, never finished ---------------------------------------------------


def _stomp(t: Target, login: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", t.stomp), timeout=10)
    s.sendall(
        f"CONNECT\naccept-version:1.2\nheart-beat:0,0\nlogin:{login}\npasscode:pw\n\n\0".encode()
    )
    answer = b""
    while b"\0" not in answer:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before CONNECTED")
        answer += chunk
    return s


def _native(t: Target, login: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", t.port), timeout=10)
    s.sendall(encode_packet(p.Connect(login=login, passcode="pw"), 1, 0, 0, p.PROTOCOL_VERSION))
    s.recv(65536)  # Connected (a few dozen bytes)
    s.sendall(encode_packet(p.SessionOpen(1), 2, 1, 0, p.PROTOCOL_VERSION))
    return s


def partial_frames(t: Target, stop: Any) -> None:
    """Logged-in users begin 16 MiB frames and send 15 MiB of each: 60 STOMP SENDs and
    30 native Sends from a user with no roles to a queue it may not send to, and 20
    STOMP SENDs from a user who may."""
    head = f"SEND\ndestination:/queue/big\ncontent-length:{16 * MIB - 4096}\n\n".encode()
    native = encode_packet(
        p.Send(1, "queue:big", Message(body=b"x" * (16 * MIB - 4096))), 0, 1, 0, p.PROTOCOL_VERSION
    )[: 15 * MIB]
    stomp = memoryview(head + b"x" * (15 * MIB))  # one copy, every connection sends it
    jobs: list[tuple[socket.socket, memoryview]] = []
    for i in range(110):
        try:
            if i < 60:
                jobs.append((_stomp(t, "nobody"), stomp))
            elif i < 90:
                jobs.append((_native(t, "nobody"), memoryview(native)))
            else:
                jobs.append((_stomp(t, "writer"), stomp))
        except OSError:
            continue
    sent = [0] * len(jobs)
    for s, _ in jobs:
        s.setblocking(False)
    live = set(range(len(jobs)))
    while not stop.is_set() and live:
        for i in list(live):
            s, data = jobs[i]
            if sent[i] >= len(data):
                continue
            try:
                sent[i] += s.send(data[sent[i] : sent[i] + 262144])
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                live.discard(i)
        stop.wait(0.005)
    stop.wait()


# -- a subscriber that never reads, on a small disk ------------------------------------------


def stuck_subscriber_small_disk(t: Target, stop: Any) -> None:
    """A STOMP subscriber to ``topic:news`` (client acks) that never reads its socket nor
    acks, and a producer of non-persistent 8 KiB messages to the topic, as fast as it
    can: what the subscription's bound drops goes to the dead-letter queue. Once that
    made a journal write of every dropped message and filled a small disk, and every
    producer waited. (A durable subscription keeps what it is sent, as a queue does:
    bound it with the topic's ``max_bytes``.)"""
    stuck = socket.create_connection(("127.0.0.1", t.stomp))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:bystander\npasscode:pw\n\n\0")
    stuck.recv(4096)
    stuck.sendall(b"SUBSCRIBE\nid:0\ndestination:/topic/news\nack:client-individual\n\n\0")
    body = b"s" * 8192
    with t.connect() as conn, conn.session() as s:
        while not stop.is_set():
            try:
                for _ in range(64):
                    s.send("topic:news", body, persistent=False)
                s.flush()
            except chute.ChuteError:
                stop.wait(0.1)  # refused (the disk): try again
    stuck.close()


# -- the log, flooded ------------------------------------------------------------------------


def log_flood(t: Target, stop: Any) -> None:
    """As fast as one client can: HTTP requests with an over-long request line or header,
    and TLS ClientHellos on the plain native and STOMP ports."""
    hello = bytes([0x16, 0x03, 0x01, 0x00, 0x05]) + b"\x01\x00\x00\x01\x00"
    requests = (
        (t.http, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        (t.http, b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n"),
        (t.port, hello),
        (t.stomp, hello),
    )
    i = 0
    while not stop.is_set():
        port, data = requests[i % len(requests)]
        i += 1
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(data)
                while s.recv(65536):
                    pass
        except OSError:
            stop.wait(0.01)


# -- a stray segment at start ---------------------------------------------------------------

KEPT = 2000


def _store_then_stray(data_dir: str, config: str) -> None:
    """Before the broker under test starts: a broker on the same data stores KEPT
    acknowledged persistent messages in ``queue:kept`` and stops; then a stray segment
    (a file named as a segment ten after the last, holding random bytes) is put in its
    journal directory."""
    proc, url = start_broker(data_dir, config)
    try:
        with chute.connect(url) as conn, conn.session() as s:
            for i in range(KEPT):
                s.send("queue:kept", f"{i:09d}".encode() + b"k" * 1024)
            s.flush()
    finally:
        proc.terminate()
        proc.wait(30)
    journal = Path(data_dir) / "journal"
    segments = sorted(journal.glob("*.seg"))
    last = int(segments[-1].stem) if segments else 0
    stray = journal / f"{last + 10:010d}.seg"
    stray.write_bytes(random.Random(13).randbytes(1 << 20))


def _kept_lost(t: Target) -> int:
    got: set[bytes] = set()
    with t.connect() as conn, conn.session(ack="auto") as s:
        consumer = s.consumer("queue:kept")
        while (message := consumer.receive(timeout=2)) is not None:
            got.add(message.body[:9])
    return KEPT - len(got)


def stray_segment(t: Target, stop: Any) -> None:
    """Nothing while the bystander runs: the attack was the stray segment at start."""
    stop.wait()


ATTACKS: dict[str, tuple[Callable[[Target, Any], None], Setup]] = {
    "tunnel-bodies": (tunnel_bodies, Setup(users=True)),
    "partial-frames": (partial_frames, Setup(users=True)),
    "stuck-subscriber-small-disk": (
        stuck_subscriber_small_disk,
        Setup(
            # flow_backlog off: producer flow control would pause the producer before
            # the disk fills within a run of a few seconds
            config='segment_size = "8MiB"\ndisk_free_limit = "16MiB"\nflow_backlog = 0\n',
            users=True,
            disk="200m",
        ),
    ),
    "log-flood": (log_flood, Setup()),
    "stray-segment": (stray_segment, Setup(prepare=_store_then_stray, lost=_kept_lost)),
}


def mounted(path: str, size: str) -> Callable[[], None]:
    """Mount a tmpfs of ``size`` on ``path`` (as root); returns what unmounts it.

    Raises:
        OSError: not root, or the mount failed.
    """
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        raise OSError("a small disk needs root (mount -t tmpfs)")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=False
    )
    if result.returncode != 0:
        raise OSError(f"mount -t tmpfs on {path} failed")

    def unmount() -> None:
        subprocess.run(["umount", "-l", path], check=False)

    return unmount
