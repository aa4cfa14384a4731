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

from .conftest import ChuteServer, free_port, start_server
from .hostile import config, raw, until_closed

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
