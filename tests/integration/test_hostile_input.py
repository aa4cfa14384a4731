"""What a client may make the broker hold, and log, by sending badly (the hostile bench's
attacks, each as a test): a tunnel POST body before login, frames and packets begun and
never finished after login, and protocol errors flooding the log.

Real sockets and a real ``chute serve``; each test asserts on the broker's answer, its
statistics or its log, not on timing.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import chute
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData

from .conftest import ChuteServer, free_port, start_server
from .hostile import config, raw, stomp_frames, until_closed, wait_until

MIB = 1 << 20
CHUTE = "application/x-chute"


def _http_broker(tmp_path: Path, text: str = "") -> tuple[ChuteServer, int]:
    http = free_port()
    server = start_server(tmp_path, "--config", config(tmp_path, text), "--http-port", str(http))
    return server, http


def _head(sock: socket.socket) -> bytes:
    """An HTTP answer's status line and headers (and what came with them)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def _tunnel_session(http: int) -> str:
    sock = raw(http)
    sock.sendall(
        f"POST /chute HTTP/1.1\r\nHost: x\r\nContent-Type: {CHUTE}\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
    )
    answer = until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 201"), answer
    return str(json.loads(answer.split(b"\r\n\r\n", 1)[1])["session"])


def _post_head(sid: str, length: int | None) -> bytes:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST /chute/{sid} HTTP/1.1\r\nHost: x\r\nContent-Type: {CHUTE}\r\n"
        f"Chute-Seq: 1\r\n{size}\r\n\r\n"
    ).encode()


# -- 1. the HTTP tunnel before login -------------------------------------------------------


def test_tunnel_body_before_login_refused_from_its_length(tmp_path: Path) -> None:
    """A POST announcing 16 MiB before its session logged in is refused (413) at once,
    its body not read: before, the broker read up to max_packet_size of it."""
    server, http = _http_broker(tmp_path)
    try:
        sid = _tunnel_session(http)
        sock = raw(http)
        sock.sendall(_post_head(sid, 16 * MIB) + b"\0" * 65536)
        head = _head(sock)
        assert head.startswith(b"HTTP/1.1 413"), head
        assert b"before login" in head
        until_closed(sock, timeout=5)  # closed, the rest of the body not read (no linger)
        sock.close()
    finally:
        server.stop()


def test_tunnel_chunked_body_before_login_refused_as_it_comes(tmp_path: Path) -> None:
    """Without a Content-Length, the body is refused once it passes the login budget."""
    server, http = _http_broker(tmp_path)
    try:
        sid = _tunnel_session(http)
        sock = raw(http)
        sock.sendall(_post_head(sid, None))
        chunk = b"10000\r\n" + b"\0" * 65536 + b"\r\n"
        sock.settimeout(10)
        answered = b""
        for _ in range(4 * 16):  # up to 4 MiB, far past the budget
            try:
                sock.sendall(chunk)
            except OSError:
                break
        answered = _head(sock)
        assert answered.startswith(b"HTTP/1.1 413"), answered
        sock.close()
    finally:
        server.stop()


# -- 5. the log, flooded ----------------------------------------------------------------------


def _lines_since(server: ChuteServer, start: int) -> list[str]:
    return [line for line in server.lines[start:] if line.strip()]


def test_overlong_http_requests_logged_once_per_flood(tmp_path: Path) -> None:
    """200 requests with an over-long request line or header: each is answered 400, and
    the log gets one line for the flood, not an ERROR with a traceback for each (before:
    ~9 lines each)."""
    server, http = _http_broker(tmp_path)
    try:
        start = len(server.lines)
        for i in range(200):
            sock = raw(http)
            if i % 2:
                sock.sendall(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            else:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n")
            answer = until_closed(sock)
            sock.close()
            assert answer.split(b" ", 2)[1] == b"400", answer[:200]
        # a request that breaks nothing afterwards: its answer comes after any log line of
        # the flood was written (one loop, one process)
        sock = raw(http)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert until_closed(sock).startswith(b"HTTP/1.1 200")
        sock.close()
        lines = _lines_since(server, start)
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
        assert len(lines) <= 2, lines
        assert any("broke the protocol before logging in" in line for line in lines), lines
    finally:
        server.stop()


def test_tls_handshakes_on_a_plain_port_logged_once_per_flood(tmp_path: Path) -> None:
    """50 TLS ClientHellos on the plain native port: each closed, one WARNING in all
    (before: one per connection)."""
    server, _ = _http_broker(tmp_path)
    try:
        start = len(server.lines)
        hello = bytes([0x16, 0x03, 0x01, 0x00, 0x05]) + b"\x01\x00\x00\x01\x00"
        for _ in range(50):
            sock = raw(server.port)
            sock.sendall(hello)
            until_closed(sock)
            sock.close()
        with chute.connect(server.url) as conn:
            wait_until(lambda: conn.stat()["sockets"]["tls_on_plain_port"] == 50, "50 closed")
        lines = [line for line in _lines_since(server, start) if "TLS" in line]
        assert len(lines) == 1, lines
    finally:
        server.stop()


# -- 4. frames begun after login and never finished ----------------------------------------

USERS = """
[users.nobody]
password = "pw"
roles = []
[users.writer]
password = "pw"
roles = ["writer"]
[users.admin]
password = "pw"
roles = ["admin"]
[roles.writer]
send = ["queue:big"]
create = ["queue:big"]
"""


def _stomp_login(port: int, login: str) -> socket.socket:
    sock = raw(port)
    sock.sendall(
        f"CONNECT\naccept-version:1.2\nheart-beat:0,0\nlogin:{login}\npasscode:pw\n\n\0".encode()
    )
    answer = b""
    while b"\0" not in answer:
        chunk = sock.recv(65536)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"CONNECTED"), answer
    return sock


def _stomp_begin(sock: socket.socket, queue: str, size: int, sent: int) -> None:
    """``sent`` bytes of a SEND of ``size`` to ``queue``; the rest never comes."""
    sock.sendall(f"SEND\ndestination:/queue/{queue}\ncontent-length:{size}\n\n".encode())
    sock.sendall(b"x" * sent)


def _stomp_error(sock: socket.socket) -> dict[str, str]:
    frames = stomp_frames(until_closed(sock))
    assert [f.command for f in frames] == ["ERROR"], frames
    return dict(frames[0].headers)


def _native_login(port: int, login: str) -> socket.socket:
    sock = raw(port)
    sock.sendall(encode_packet(p.Connect(login=login, passcode="pw"), 1, 0, 0, p.PROTOCOL_VERSION))
    codec = PacketCodec()
    while True:
        item = codec.next_packet()
        if not isinstance(item, NeedData):
            assert isinstance(item[1], p.Connected), item
            return sock
        data = sock.recv(65536)
        assert data, "closed instead of Connected"
        codec.receive_data(data)


def _native_begin(sock: socket.socket, address: str, size: int, sent: int) -> None:
    """The first ``sent`` bytes of a Send of a ``size``-byte body to ``address``."""
    session = encode_packet(p.SessionOpen(1), 2, 1, 0, p.PROTOCOL_VERSION)
    send = encode_packet(p.Send(1, address, Message(body=b"x" * size)), 0, 1, 0, p.PROTOCOL_VERSION)
    sock.sendall(session + send[:sent])


def _native_error(sock: socket.socket) -> p.Error:
    """The connection-level Error the broker closes ``sock`` with (after its answers)."""
    codec = PacketCodec()
    codec.receive_data(until_closed(sock))
    packets = []
    while not isinstance(item := codec.next_packet(), NeedData):
        packets.append(item[1])
    assert packets, "nothing before the close"
    assert isinstance(packets[-1], p.Error), packets
    return packets[-1]


def _stat(server: ChuteServer) -> dict[str, Any]:
    with chute.connect(server.url, login="admin", passcode="pw") as conn:
        return dict(conn.stat()["sockets"])


def _users_broker(tmp_path: Path, extra: str = "") -> tuple[ChuteServer, int]:
    stomp = free_port()
    path = config(tmp_path, extra + USERS)
    return start_server(tmp_path, "--config", path, "--stomp-port", str(stomp)), stomp


def test_stomp_send_refused_from_its_header(tmp_path: Path) -> None:
    """A user who may not send to a queue begins a 16 MiB SEND to it: refused (ERROR,
    access-denied) once its headers and 1 MiB are in, not held until its body ends."""
    server, stomp = _users_broker(tmp_path)
    try:
        sock = _stomp_login(stomp, "nobody")
        _stomp_begin(sock, "big", 16 * MIB - 1024, 1 * MIB)
        assert _stomp_error(sock)["code"] == "access-denied"
        stats = _stat(server)
        assert stats["partial_frame_bytes"] == 0
        assert stats["refused_from_header"] == 1
    finally:
        server.stop()


def test_native_send_refused_from_its_header(tmp_path: Path) -> None:
    """The same over the native protocol: a Send's address, in its first bytes, decides."""
    server, _ = _users_broker(tmp_path)
    try:
        sock = _native_login(server.port, "nobody")
        _native_begin(sock, "queue:big", 15 * MIB, 1 * MIB)
        error = _native_error(sock)
        assert error.code == "access-denied", error
    finally:
        server.stop()


def test_unfinished_frames_bounded_per_user(tmp_path: Path) -> None:
    """Frames a user may send, begun on several connections and never finished: past
    max_partial_bytes_per_user the connection that went over is closed, told why, and
    the broker counts what the others hold."""
    server, stomp = _users_broker(tmp_path, 'max_partial_bytes_per_user = "4MiB"\n')
    try:
        held = []
        for _ in range(2):
            sock = _stomp_login(stomp, "writer")
            _stomp_begin(sock, "big", 8 * MIB, 3 * MIB // 2)
            held.append(sock)
        wait_until(lambda: _stat(server)["partial_frame_bytes"] >= 3 * MIB, "3 MiB held")
        over = _stomp_login(stomp, "writer")
        _stomp_begin(over, "big", 8 * MIB, 3 * MIB // 2)
        assert _stomp_error(over)["code"] == "partial-limit"
        stats = _stat(server)
        assert stats["closed_partial_per_user"] == 1
        assert 3 * MIB <= stats["partial_frame_bytes"] <= 4 * MIB
        for sock in held:
            sock.close()
        wait_until(lambda: _stat(server)["partial_frame_bytes"] == 0, "all freed")
    finally:
        server.stop()


def test_unfinished_frames_count_against_memory(tmp_path: Path) -> None:
    """Unfinished frames count with the queues against memory_high_watermark: past it,
    a connection with a large frame still arriving is closed (code memory-short)."""
    server, stomp = _users_broker(tmp_path, 'max_memory = "1MiB"\nmemory_high_watermark = "4MiB"\n')
    try:
        first = _stomp_login(stomp, "writer")
        _stomp_begin(first, "big", 8 * MIB, 3 * MIB)
        wait_until(lambda: _stat(server)["partial_frame_bytes"] >= 3 * MIB, "3 MiB held")
        second = _stomp_login(stomp, "admin")
        _stomp_begin(second, "big", 8 * MIB, 2 * MIB)
        assert _stomp_error(second)["code"] == "memory-short"
        assert _stat(server)["closed_partial_memory"] == 1
        first.close()
    finally:
        server.stop()


def test_frame_that_stops_arriving_closes_its_connection(tmp_path: Path) -> None:
    """A frame whose bytes stop for partial_frame_timeout_ms closes its connection, told
    why; one that keeps arriving, slowly, does not."""
    server, stomp = _users_broker(tmp_path, "partial_frame_timeout_ms = 1500\n")
    try:
        stalled = _stomp_login(stomp, "writer")
        _stomp_begin(stalled, "big", 2 * MIB, 256 << 10)
        native = _native_login(server.port, "writer")
        _native_begin(native, "queue:big", 2 * MIB, 256 << 10)
        assert _stomp_error(stalled)["code"] == "frame-timeout"
        assert _native_error(native).code == "frame-timeout"
        assert _stat(server)["closed_partial_timeout"] == 2
        # a frame that trickles in (a byte every half second) is left alone
        slow = _stomp_login(stomp, "writer")
        slow.sendall(b"SEND\ndestination:/queue/big\ncontent-length:8\n\nab")
        for byte in b"cdefgh":
            time.sleep(0.5)  # the client's pace, not a wait for the broker
            slow.sendall(bytes([byte]))
        slow.sendall(b"\0DISCONNECT\nreceipt:1\n\n\0")
        frames = stomp_frames(until_closed(slow))
        assert [f.command for f in frames] == ["RECEIPT"], frames
    finally:
        server.stop()
