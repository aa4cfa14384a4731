"""Raw-socket clients for the connection-limit tests: they connect, say little or too
much, and read what the broker answers before it closes."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.stomp.codec import StompCodec
from chute.stomp.frames import HEARTBEAT, SERVER_COMMANDS, Frame

from .conftest import ChuteServer


def config(tmp_path: Path, text: str) -> str:
    """A configuration file with ``text`` under ``[server]``; its path, for --config."""
    path = tmp_path / "chute.toml"
    path.write_text("[server]\n" + text)
    return str(path)


def raw(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to the broker from ``source`` (any 127.x.y.z is this machine)."""
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the broker sends until it closes the connection (a reset ends it too)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def native_error(data: bytes) -> p.Error:
    """The one packet in ``data``, which must be an Error."""
    codec = PacketCodec()
    codec.receive_data(data)
    item = codec.next_packet()
    assert not isinstance(item, NeedData), data
    packet = item[1]
    assert isinstance(packet, p.Error), packet
    return packet


def stomp_frames(data: bytes) -> list[Frame]:
    """The STOMP frames in ``data`` (heart-beats left out)."""
    codec = StompCodec(commands=SERVER_COMMANDS)
    codec.receive_data(data)
    frames: list[Frame] = []
    while True:
        item = codec.next_frame()
        if isinstance(item, NeedData):
            return frames
        if item is not HEARTBEAT:
            assert isinstance(item, Frame)
            frames.append(item)


def native_connect() -> bytes:
    return encode_packet(p.Connect(), 1, 0, 0, p.PROTOCOL_VERSION)


def connected(sock: socket.socket) -> p.Connected:
    """Log in over a raw native socket; the broker's Connected."""
    sock.sendall(native_connect())
    codec = PacketCodec()
    while True:
        item = codec.next_packet()
        if not isinstance(item, NeedData):
            assert isinstance(item[1], p.Connected), item
            return item[1]
        data = sock.recv(65536)
        assert data, "the broker closed instead of answering Connect"
        codec.receive_data(data)


def websocket(port: int) -> socket.socket:
    """A WebSocket to ``/stomp`` (upgraded, nothing sent on it yet)."""
    sock = raw(port)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /stomp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def ws_header(size: int, opcode: int = 0x2) -> bytes:
    """A client's frame header for ``size`` bytes of payload (mask key 0: sent as is)."""
    if size < 126:
        length = bytes([0x80 | size])
    elif size < 1 << 16:
        length = bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", size)
    return bytes([0x80 | opcode]) + length + b"\0\0\0\0"


def ws_messages(data: bytes) -> list[tuple[int, bytes]]:
    """The server's frames in ``data`` as (opcode, payload)."""
    out = []
    pos = 0
    while pos + 2 <= len(data):
        opcode = data[pos] & 0x0F
        size = data[pos + 1] & 0x7F
        pos += 2
        if size == 126:
            (size,) = struct.unpack_from("!H", data, pos)
            pos += 2
        elif size == 127:
            (size,) = struct.unpack_from("!Q", data, pos)
            pos += 8
        out.append((opcode, data[pos : pos + size]))
        pos += size
    return out


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``check`` until it holds (a deadline, not a guess at how long things take)."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


def lines_with(server: ChuteServer, text: str) -> list[str]:
    return [line for line in server.lines if text in line]


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")
