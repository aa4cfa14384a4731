"""Seed 002's clients against ``chute serve`` with its source and sink listeners.

The clients are :mod:`tests.integration.test_smq_client`, written from the
notes and not from ``chute.smq``.
"""

from __future__ import annotations

import queue
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

from .conftest import ChuteServer, free_port, start_server
from .test_smq_client import MessageQueueReader, MessageQueueWriter, QueueClosed

HOST = "127.0.0.1"
TIMEOUT = 10.0


class Broker:
    """A running ``chute serve`` with smq listeners (and STOMP) on free ports."""

    def __init__(self, tmp_path: Path, queue_name: str = "jobs", *extra: str) -> None:
        self.tmp_path = tmp_path
        self.queue_name = queue_name
        self.source_port = free_port()
        self.sink_port = free_port()
        self.stomp_port = free_port()
        self.extra = extra
        self.server = self._start()

    def _start(self, data_dir: Path | None = None) -> ChuteServer:
        return start_server(
            self.tmp_path,
            "--smq-queue",
            self.queue_name,
            "--smq-source-port",
            str(self.source_port),
            "--smq-sink-port",
            str(self.sink_port),
            "--stomp-port",
            str(self.stomp_port),
            *self.extra,
            data_dir=data_dir,
        )

    def restart_after_kill(self) -> None:
        self.server.stop(signal.SIGKILL)
        self.server = self._start(self.server.data_dir)

    def writer(self) -> MessageQueueWriter:
        return MessageQueueWriter(HOST, self.source_port)

    def reader(self) -> MessageQueueReader:
        return MessageQueueReader(HOST, self.sink_port)

    def wait_for_log(self, text: str) -> str:
        return wait_for_line(self.server, text)

    def stop(self) -> None:
        if self.server.process.poll() is None:
            self.server.stop()


def wait_for_line(server: ChuteServer, text: str, deadline: float = TIMEOUT) -> str:
    """The first output line of ``server`` containing ``text``, polled for with a deadline."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for line in list(server.lines):
            if text in line:
                return line
        time.sleep(0.02)
    raise AssertionError(f"no log line with {text!r} in:\n{server.output}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.stop()


def send_all(b: Broker, bodies: list[bytes]) -> None:
    writer = b.writer()
    for body in bodies:
        writer.write(body)
    writer.close()


def test_listeners_are_announced_and_off_by_default(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    try:
        line = b.wait_for_log("chute listening")
        assert f"smq-source 127.0.0.1:{b.source_port}" in line
        assert f"smq-sink 127.0.0.1:{b.sink_port}" in line
    finally:
        b.stop()
    plain = start_server(tmp_path / "plain")
    try:
        assert "smq" not in plain.output
    finally:
        plain.stop()


def test_source_to_sink_in_order_with_ids(broker: Broker) -> None:
    own_id = bytes(range(16))
    writer = broker.writer()
    writer.write(b"first")
    writer.write(b"second", own_id)
    writer.write(b"")
    writer.write(bytes(range(256)) * 1000)
    writer.close()
    reader = broker.reader()
    got = [reader.read() for _ in range(4)]
    reader.close()
    assert [m.contents for m in got] == [b"first", b"second", b"", bytes(range(256)) * 1000]
    assert got[1].message_id == own_id
    generated = {got[0].message_id, got[2].message_id, got[3].message_id}
    assert len(generated) == 3
    assert all(len(i) == 16 for i in generated)
    assert not any(m.possibly_replayed for m in got)


def test_several_sources_at_once(broker: Broker) -> None:
    writers = [broker.writer() for _ in range(3)]
    for n in range(20):
        for w, writer in enumerate(writers):
            writer.write(f"{w}:{n}".encode())
    for writer in writers:
        writer.close()
    reader = broker.reader()
    got = [reader.read().contents.decode() for _ in range(60)]
    reader.close()
    assert sorted(got) == sorted(f"{w}:{n}" for w in range(3) for n in range(20))
    for w in range(3):  # each source's messages keep their order
        mine = [g for g in got if g.startswith(f"{w}:")]
        assert mine == [f"{w}:{n}" for n in range(20)]


def test_one_sink_at_a_time_and_a_dropped_sink_gives_back_a_replay(broker: Broker) -> None:
    send_all(broker, [b"one", b"two", b"three"])
    first = broker.reader()
    assert first.read().contents == b"one"
    second = broker.reader()  # connected, but waits while the first is there
    broker.wait_for_log("waits: another sink is connected")
    held = first.receive()  # not acknowledged
    assert (held.contents, held.possibly_replayed) == (b"two", False)
    assert second.nothing_within(0.3)
    first.close()  # without 'Y': "two" goes to the next sink as a possible replay
    again = second.read()
    assert (again.contents, again.message_id, again.possibly_replayed) == (
        b"two",
        held.message_id,
        True,
    )
    third = second.read()
    assert (third.contents, third.possibly_replayed) == (b"three", False)
    second.close()


def test_an_answer_other_than_y_ends_the_session(broker: Broker) -> None:
    send_all(broker, [b"refused"])
    reader = broker.reader()
    assert reader.receive().contents == b"refused"
    reader.sock.sendall(b"N")
    with pytest.raises(QueueClosed):
        reader.receive()
    broker.wait_for_log("answered b'N'")
    again = broker.reader().read()
    assert (again.contents, again.possibly_replayed) == (b"refused", True)


def test_kill_9_keeps_every_y_and_marks_replays(broker: Broker) -> None:
    bodies = [f"m{n}".encode() for n in range(50)]
    send_all(broker, bodies)  # every one answered 'Y'
    reader = broker.reader()
    assert reader.read().contents == b"m0"  # acknowledged: gone for good
    seen = reader.receive()  # written to the sink, never acknowledged
    assert seen.contents == b"m1"
    broker.restart_after_kill()
    reader.close()
    reader = broker.reader()
    got = [reader.read() for _ in range(49)]
    assert [m.contents for m in got] == bodies[1:]
    assert got[0].possibly_replayed  # it may have been handled before the crash
    assert got[0].message_id == seen.message_id
    assert not any(m.possibly_replayed for m in got[1:])
    assert reader.nothing_within(0.3)
    reader.close()


def test_kill_9_while_sources_write(broker: Broker) -> None:
    """Every message a source got 'Y' for is there after a kill -9, once."""
    writer = broker.writer()
    acked: list[bytes] = []
    for n in range(200):
        writer.write(f"w{n}".encode())
        acked.append(f"w{n}".encode())
    writer.send_frame(b"maybe")  # the kill may come before or after it is stored
    broker.restart_after_kill()
    reader = broker.reader()
    got = [reader.read().contents for _ in range(200)]
    assert got == acked
    reader.sock.settimeout(1.0)
    try:
        extra = reader.read(1.0).contents
    except (TimeoutError, QueueClosed):
        extra = None
    assert extra in (None, b"maybe")
    reader.close()


def test_a_pipelining_source_gets_its_answers_in_order(broker: Broker) -> None:
    writer = broker.writer()
    for n in range(100):
        writer.send_frame(f"p{n}".encode())
    writer.sock.settimeout(TIMEOUT)
    answers = b""
    while len(answers) < 100:
        chunk = writer.sock.recv(100 - len(answers))
        assert chunk, "the queue closed the connection"
        answers += chunk
    assert answers == b"Y" * 100
    writer.close()
    reader = broker.reader()
    assert [reader.read().contents for _ in range(100)] == [f"p{n}".encode() for n in range(100)]
    reader.close()


def test_a_full_queue_closes_the_source_without_y(tmp_path: Path) -> None:
    source, sink = free_port(), free_port()
    config = tmp_path / "chute.toml"
    config.write_text(
        f'[smq]\nqueue = "small"\nsource_port = {source}\nsink_port = {sink}\n'
        '[destinations."queue:small"]\nmax_messages = 2\noverflow = "reject"\n'
    )
    server = start_server(tmp_path, "--config", str(config))
    try:
        writer = MessageQueueWriter(HOST, source)
        writer.write(b"1")
        writer.write(b"2")
        with pytest.raises(QueueClosed):
            writer.write(b"3")
        reader = MessageQueueReader(HOST, sink)
        assert [reader.read().contents for _ in range(2)] == [b"1", b"2"]
        assert reader.nothing_within(0.3)
        reader.close()
        assert "queue:small" in wait_for_line(server, "refused: ")
    finally:
        server.stop()


# -- STOMP interop ----------------------------------------------------------------------


class StompClient(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, port: int) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()
        self.conn = stomp.Connection12([(HOST, port)], auto_decode=False)
        self.conn.set_listener("", self)
        self.conn.connect(wait=True)

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()


def test_seed_002_source_to_stomp_consumer(broker: Broker) -> None:
    own_id = b"\x01" * 16
    writer = broker.writer()
    writer.write(b"to stomp", own_id)
    writer.write(b"\x00binary\xff")
    writer.close()
    client = StompClient(broker.stomp_port)
    try:
        client.conn.subscribe(f"/queue/{broker.queue_name}", id="s1", ack="client-individual")
        first = client.messages.get(timeout=TIMEOUT)
        second = client.messages.get(timeout=TIMEOUT)
        assert first.body == b"to stomp"
        assert first.headers["message-id"] == own_id.hex()
        assert second.body == b"\x00binary\xff"
        for frame in (first, second):
            client.conn.ack(frame.headers["ack"])
    finally:
        client.close()


def test_stomp_producer_to_seed_002_sink(broker: Broker) -> None:
    client = StompClient(broker.stomp_port)
    try:
        client.conn.send(f"/queue/{broker.queue_name}", b"from stomp", receipt="r1")
        assert client.receipts.get(timeout=TIMEOUT) == "r1"
        client.conn.send(
            f"/queue/{broker.queue_name}", b"\x00\x01", headers={"content-type": "x"}, receipt="r2"
        )
        assert client.receipts.get(timeout=TIMEOUT) == "r2"
    finally:
        client.close()
    reader = broker.reader()
    first, second = reader.read(), reader.read()
    reader.close()
    assert (first.contents, second.contents) == (b"from stomp", b"\x00\x01")
    assert len(first.message_id) == 16
    assert first.message_id != second.message_id


# -- bad input ------------------------------------------------------------------------


def raw(port: int) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=TIMEOUT)


def closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    ("garbage", "log"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "unknown source frame type b'G'"),
        (b"M" + struct.pack(">i", 1 << 30), "over the limit"),
        (b"M" + struct.pack(">i", -5), "negative message length"),
        (b"I" + b"x" * 16 + struct.pack(">i", 0x7FFFFFFF), "over the limit"),
    ],
)
def test_source_garbage_closes_only_that_connection(
    broker: Broker, garbage: bytes, log: str
) -> None:
    send_all(broker, [b"kept"])
    sock = raw(broker.source_port)
    sock.sendall(garbage)
    assert closed_by_broker(sock)
    sock.close()
    broker.wait_for_log(log)
    send_all(broker, [b"after"])
    reader = broker.reader()
    assert [reader.read().contents for _ in range(2)] == [b"kept", b"after"]
    reader.close()


def test_y_then_garbage_keeps_the_acked_message(broker: Broker) -> None:
    writer = broker.writer()
    writer.write(b"acked")
    writer.sock.sendall(b"Z")
    assert closed_by_broker(writer.sock)
    writer.sock.close()
    reader = broker.reader()
    assert reader.read().contents == b"acked"
    reader.close()


def test_source_dropped_mid_frame(broker: Broker) -> None:
    sock = raw(broker.source_port)
    sock.sendall(b"M" + struct.pack(">i", 100) + b"only part of it")
    sock.shutdown(socket.SHUT_WR)
    assert closed_by_broker(sock)
    sock.close()
    broker.wait_for_log("middle of a frame")
    reader = broker.reader()
    assert reader.nothing_within(0.3)  # a half frame is never a message
    reader.close()


def test_sink_garbage_and_a_waiting_sinks_bytes(broker: Broker) -> None:
    sink = raw(broker.sink_port)
    sink.sendall(b"Y")  # nothing was delivered to answer
    assert closed_by_broker(sink)
    sink.close()
    broker.wait_for_log("no message awaits its answer")
    send_all(broker, [b"still here"])
    reader = broker.reader()
    assert reader.read().contents == b"still here"
    reader.close()


def test_config_file_table(tmp_path: Path) -> None:
    source, sink = free_port(), free_port()
    config = tmp_path / "chute.toml"
    config.write_text(f'[smq]\nqueue = "from-file"\nsource_port = {source}\nsink_port = {sink}\n')
    server = start_server(tmp_path, "--config", str(config))
    try:
        MessageQueueWriter(HOST, source).write(b"configured")
        reader = MessageQueueReader(HOST, sink)
        assert reader.read().contents == b"configured"
        reader.close()
    finally:
        server.stop()


def test_bad_smq_flag_is_a_clear_error(tmp_path: Path) -> None:
    off = ["--port", "0", "--stomp-port", "0", "--http-port", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "chute.cli", "serve", *off, "--smq-queue", "topic:x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "smq.queue: 'topic:x' is not a plain queue" in done.stderr
    assert "Traceback" not in done.stderr
