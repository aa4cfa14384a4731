"""A seed-002 client written from /work/shared/notes/simple-message-queue.md alone.

:class:`MessageQueueWriter` and :class:`MessageQueueReader` do what the Java
classes of seed 002 do on the wire, with nothing taken from ``chute.smq``, so
the tests that use them check the broker's wire independently of its codec.
The tests in this file check the client's own bytes against the notes, over a
socket pair (no broker).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import pytest

TIMEOUT = 10.0


class QueueClosed(Exception):
    """The queue closed the connection, or answered something unexpected."""


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise QueueClosed("the queue closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class MessageQueueWriter:
    """A source: ``write`` returns once the queue answered ``'Y'``."""

    def __init__(self, host: str, port: int, *, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    @classmethod
    def over(cls, sock: socket.socket) -> MessageQueueWriter:
        writer = cls.__new__(cls)
        writer.sock = sock
        return writer

    def write(self, contents: bytes, message_id: bytes | None = None) -> None:
        self.send_frame(contents, message_id)
        answer = _read_exactly(self.sock, 1)
        if answer != b"Y":
            raise QueueClosed(f"the queue answered {answer!r}, not 'Y'")

    def send_frame(self, contents: bytes, message_id: bytes | None = None) -> None:
        """Write one frame without waiting for the answer."""
        if message_id is None:
            frame = b"M" + struct.pack(">i", len(contents)) + contents
        else:
            assert len(message_id) == 16
            frame = b"I" + message_id + struct.pack(">i", len(contents)) + contents
        self.sock.sendall(frame)

    def close(self) -> None:
        try:
            self.sock.sendall(b"E")
        finally:
            self.sock.close()


@dataclass(frozen=True)
class ReceivedMessage:
    message_id: bytes
    contents: bytes
    possibly_replayed: bool


class MessageQueueReader:
    """A sink. ``read`` acks before it returns, as the Java reader does;
    ``receive`` leaves the ack to :meth:`ack` (or to nobody)."""

    def __init__(self, host: str, port: int, *, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    @classmethod
    def over(cls, sock: socket.socket) -> MessageQueueReader:
        reader = cls.__new__(cls)
        reader.sock = sock
        return reader

    def read(self, timeout: float = TIMEOUT) -> ReceivedMessage:
        message = self.receive(timeout)
        self.ack()
        return message

    def receive(self, timeout: float = TIMEOUT) -> ReceivedMessage:
        self.sock.settimeout(timeout)
        kind = _read_exactly(self.sock, 1)
        if kind not in (b"M", b"R"):
            raise QueueClosed(f"unknown frame type {kind!r} from the queue")
        message_id = _read_exactly(self.sock, 16)
        (length,) = struct.unpack(">i", _read_exactly(self.sock, 4))
        return ReceivedMessage(message_id, _read_exactly(self.sock, length), kind == b"R")

    def nothing_within(self, seconds: float) -> bool:
        """True if the queue sends nothing for ``seconds`` (a check of absence)."""
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1)
        except TimeoutError:
            return True
        raise AssertionError(f"the queue sent {data!r}")

    def ack(self) -> None:
        self.sock.sendall(b"Y")

    def close(self) -> None:
        self.sock.close()


# -- the client's own bytes, against the notes ------------------------------------------


@pytest.fixture
def pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.settimeout(TIMEOUT)
    b.settimeout(TIMEOUT)
    return a, b


def test_writer_frames_follow_the_notes(pair: tuple[socket.socket, socket.socket]) -> None:
    client, queue = pair
    writer = MessageQueueWriter.over(client)
    queue.sendall(b"YY")  # the answers, ahead of time
    writer.write(b"hello")
    writer.write(b"x", bytes(range(16)))
    writer.close()
    assert _drain(queue) == (
        b"M\x00\x00\x00\x05hello" + b"I" + bytes(range(16)) + b"\x00\x00\x00\x01x" + b"E"
    )


def test_writer_fails_without_y(pair: tuple[socket.socket, socket.socket]) -> None:
    client, queue = pair
    writer = MessageQueueWriter.over(client)
    queue.close()
    with pytest.raises((QueueClosed, OSError)):
        writer.write(b"lost")


def test_reader_parses_m_and_r_and_acks(pair: tuple[socket.socket, socket.socket]) -> None:
    client, queue = pair
    reader = MessageQueueReader.over(client)
    ident = b"0123456789abcdef"
    queue.sendall(b"M" + ident + b"\x00\x00\x00\x02hi" + b"R" + ident + b"\x00\x00\x00\x00")
    assert reader.read() == ReceivedMessage(ident, b"hi", False)
    assert reader.read() == ReceivedMessage(ident, b"", True)
    reader.close()
    assert _drain(queue) == b"YY"


def _drain(sock: socket.socket) -> bytes:
    """Everything ``sock`` receives until its peer closes."""
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)
