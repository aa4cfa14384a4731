"""What a client may make the broker hold, and log, by sending badly (the hostile bench's
attacks, each as a test): a tunnel POST body before login, frames and packets begun and
never finished after login, and protocol errors flooding the log.

Real sockets and a real ``chute serve``; each test asserts on the broker's answer, its
statistics or its log, not on timing.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import chute

from .conftest import ChuteServer, free_port, start_server
from .hostile import config, raw, until_closed, wait_until

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
