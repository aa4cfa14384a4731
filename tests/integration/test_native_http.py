"""The native protocol on the HTTP port: a WebSocket on /chute, and plain requests.

Raw clients here speak the exchange by hand (websocket-client, http.client), so
every rule of :mod:`chute.server.tunnel` is seen from the wire: packets cut
anywhere, requests numbered and retried, a lost answer fetched again, bad
requests refused with their status, a slow poller bounded, a client that goes
away ended with its messages given back, and the same logins, permissions and
limits as every other way in. The client API over these transports is the
shared suite's (test_client_api.py).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websocket

import chute
from chute.errors import AccessDenied, AuthenticationFailed, ConnectError
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData

from . import sync_aio
from .conftest import ChuteServer, free_port, start_server

TIMEOUT = 10.0
CHUTE = "application/x-chute"


@dataclass
class Broker:
    server: ChuteServer
    http: int

    def url(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.http}/chute"


def _broker(home: Path, config: str) -> Broker:
    (home / "chute.toml").write_text(config)
    port = free_port()
    server = start_server(home, "--config", str(home / "chute.toml"), "--http-port", str(port))
    return Broker(server, port)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    started = _broker(
        tmp_path_factory.mktemp("native-http"),
        '[server]\nhttp_poll_ms = 300\nhttp_session_timeout_ms = 3000\nmax_packet_size = "256KiB"'
        "\n",
    )
    yield started
    started.server.stop()


class Tunnel:
    """A client of ``/chute``'s plain requests, by hand."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        self.sid = ""
        self.seq = 0
        self.ack = 0
        self.codec = PacketCodec()

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        self.http.request(
            method, path, body=body, headers={"Content-Type": CHUTE, **(headers or {})}
        )
        answer = self.http.getresponse()
        return answer.status, answer.headers, answer.read()

    def open(self) -> str:
        status, _, body = self.request("POST", "/chute")
        assert status == 201, body
        opened = json.loads(body)
        assert opened["poll_ms"] > 0
        self.sid = opened["session"]
        return self.sid

    def post(self, data: bytes, seq: int | None = None) -> int:
        if seq is None:
            self.seq += 1
            seq = self.seq
        status, _, _ = self.request("POST", f"/chute/{self.sid}", data, {"Chute-Seq": str(seq)})
        return status

    def poll(self, ack: int | None = None) -> tuple[int, int, bytes]:
        """(status, Chute-Seq, body) of one poll; takes the answer (acks it next time)."""
        status, headers, body = self.request(
            "GET", f"/chute/{self.sid}?ack={self.ack if ack is None else ack}"
        )
        seq = int(headers.get("Chute-Seq", "0"))
        if status == 200 and ack is None:
            self.ack = seq
        return status, seq, body

    def packets(self, count: int) -> list[p.Packet]:
        """Poll until ``count`` packets came."""
        got: list[p.Packet] = []
        for _ in range(100):
            while len(got) < count and not isinstance(item := self.codec.next_packet(), NeedData):
                got.append(item[1])
            if len(got) >= count:
                return got
            status, _, body = self.poll()
            assert status in (200, 204), (status, body)
            self.codec.receive_data(body)
        raise AssertionError(f"only {len(got)} of {count} packets came")

    def login(self) -> None:
        self.open()
        assert self.post(encode_packet(p.Connect(), correlation_id=1)) == 204
        assert isinstance(self.packets(1)[0], p.Connected)


def test_a_websocket_on_chute_carries_native_packets_cut_anywhere(broker: Broker) -> None:
    ws = websocket.create_connection(broker.url("ws"), timeout=TIMEOUT, subprotocols=["chute"])
    try:
        assert ws.getsubprotocol() == "chute"
        data = encode_packet(p.Connect(), correlation_id=1) + encode_packet(
            p.Ping(), correlation_id=2
        )
        for start in range(0, len(data), 7):  # one packet's bytes in several messages
            ws.send_binary(data[start : start + 7])
        codec = PacketCodec()
        got: list[p.Packet] = []
        while len(got) < 2:
            opcode, frame = ws.recv_data()
            assert opcode == websocket.ABNF.OPCODE_BINARY  # never text
            codec.receive_data(frame)
            while not isinstance(item := codec.next_packet(), NeedData):
                got.append(item[1])
        assert isinstance(got[0], p.Connected)
        assert isinstance(got[1], p.Pong)
    finally:
        ws.close()


def test_chute_without_an_upgrade_or_a_body_says_how_to_use_it(broker: Broker) -> None:
    tunnel = Tunnel(broker.http)
    status, _, body = tunnel.request("GET", "/chute")
    assert status == 426
    assert b"ws://" in body
    assert b"POST /chute" in body


def test_packets_go_in_numbered_posts_and_come_back_in_polls(broker: Broker) -> None:
    tunnel = Tunnel(broker.http)
    tunnel.login()
    assert tunnel.post(encode_packet(p.Ping(), correlation_id=7)[:5]) == 204  # cut anywhere
    assert tunnel.post(encode_packet(p.Ping(), correlation_id=7)[5:]) == 204
    assert isinstance(tunnel.packets(1)[0], p.Pong)
    status, _, _ = tunnel.poll()  # nothing more: the poll is held, then answered empty
    assert status == 204


def test_a_retried_post_is_fed_once_and_a_lost_answer_comes_again(broker: Broker) -> None:
    tunnel = Tunnel(broker.http)
    tunnel.open()
    sends = (
        encode_packet(p.Connect(), correlation_id=1)
        + encode_packet(p.SessionOpen(1), callback_id=1)
        + encode_packet(p.Send(1, "queue:http.retried", Message.create("once")), correlation_id=2)
    )
    assert tunnel.post(sends, seq=1) == 204
    assert tunnel.post(sends, seq=1) == 204  # its answer was lost: sent again, not fed again
    status, seq, first = tunnel.poll(ack=0)
    assert (status, seq) == (200, 1)
    again = tunnel.poll(ack=0)  # that answer was lost too: the same bytes again
    assert again == (200, 1, first)
    tunnel.ack = 1
    tunnel.codec.receive_data(first)
    answers = tunnel.packets(2)
    assert isinstance(answers[0], p.Connected)
    assert isinstance(answers[1], p.Ok)
    with chute.connect(broker.url("http")) as conn:
        assert conn.stat("queue:http.retried")["destinations"][0]["depth"] == 1


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status"),
    [
        ("POST", "/chute", {"Content-Type": "text/plain"}, b"", 415),
        ("POST", "/chute", {"Origin": "https://evil.example"}, b"", 403),
        ("POST", "/chute/nosuch", {"Chute-Seq": "1"}, b"x", 404),
        ("GET", "/chute/nosuch?ack=0", {}, b"", 410),
        ("POST", "/chute/{sid}", {}, b"x", 400),  # no Chute-Seq
        ("POST", "/chute/{sid}", {"Chute-Seq": "2"}, b"x", 409),  # 1 comes first
        ("GET", "/chute/{sid}?ack=5", {}, b"", 409),
        ("GET", "/chute/{sid}?ack=x", {}, b"", 400),
        ("POST", "/chute/{sid}", {"Chute-Seq": "1"}, bytes(1100 << 10), 413),
    ],
)
def test_a_bad_request_is_refused_with_its_status(  # noqa: PLR0917 - the table's columns
    broker: Broker, method: str, path: str, headers: dict[str, str], body: bytes, status: int
) -> None:
    tunnel = Tunnel(broker.http)
    sid = tunnel.open()
    got, _, text = tunnel.request(method, path.format(sid=sid), body, headers)
    assert got == status, text
    assert text  # every refusal says why
    tunnel.login()  # the broker still serves this client
    assert tunnel.post(encode_packet(p.Ping(), correlation_id=3)) == 204
    assert isinstance(tunnel.packets(1)[0], p.Pong)


def test_one_post_at_a_time_and_a_half_sent_body_holds_nothing_else(broker: Broker) -> None:
    """A POST whose body is still arriving is the session's only one: another is
    refused (409) rather than held with its body, and the first completes."""
    tunnel = Tunnel(broker.http)
    tunnel.login()
    ping = encode_packet(p.Ping(), correlation_id=9)
    with socket.create_connection(("127.0.0.1", broker.http), timeout=TIMEOUT) as slow:
        slow.sendall(
            f"POST /chute/{tunnel.sid} HTTP/1.1\r\nHost: x\r\nContent-Type: {CHUTE}\r\n"
            f"Chute-Seq: 2\r\nContent-Length: {len(ping)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        # the broker asks for the body once the POST is this session's: it is in progress
        assert slow.recv(100).startswith(b"HTTP/1.1 100")
        slow.sendall(ping[:5])
        status, _, text = tunnel.request("POST", f"/chute/{tunnel.sid}", ping, {"Chute-Seq": "3"})
        assert status == 409
        assert b"one at a time" in text
        slow.sendall(ping[5:])
        assert slow.recv(100).startswith(b"HTTP/1.1 204")
    tunnel.seq = 2
    assert isinstance(tunnel.packets(1)[0], p.Pong)


def _post_head(sid: str, seq: int, length: int, *, expect: bool = False) -> bytes:
    return (
        f"POST /chute/{sid} HTTP/1.1\r\nHost: x\r\nContent-Type: {CHUTE}\r\n"
        f"Chute-Seq: {seq}\r\nContent-Length: {length}\r\n"
        + ("Expect: 100-continue\r\n" if expect else "")
        + "\r\n"
    ).encode()


@pytest.mark.parametrize("first", ["completes", "is cut off"])
def test_a_post_sent_again_while_the_first_is_held_gets_its_outcome(
    broker: Broker, first: str
) -> None:
    """A proxy (or the client) that gave up on a held POST sends it again: the second
    is answered as the first is (fed once), or, if the first never arrived whole,
    is fed itself; never a 409 that would end the client's connection."""
    tunnel = Tunnel(broker.http)
    tunnel.login()
    start = len(broker.server.lines)
    ping = encode_packet(p.Ping(), correlation_id=9)
    with (
        socket.create_connection(("127.0.0.1", broker.http), timeout=TIMEOUT) as held,
        socket.create_connection(("127.0.0.1", broker.http), timeout=TIMEOUT) as again,
    ):
        held.sendall(_post_head(tunnel.sid, 2, len(ping), expect=True))
        assert held.recv(100).startswith(b"HTTP/1.1 100")  # in progress: it is read now
        held.sendall(ping[:5])
        again.sendall(_post_head(tunnel.sid, 2, len(ping)) + ping)
        if first == "completes":
            held.sendall(ping[5:])
            assert held.recv(100).startswith(b"HTTP/1.1 204")
        else:
            held.close()  # its body never arrives whole: nothing of it is fed
        assert again.recv(100).startswith(b"HTTP/1.1 204")
    tunnel.seq = 2
    assert isinstance(tunnel.packets(1)[0], p.Pong)
    status, _, body = tunnel.poll()  # one Pong: the body was fed once
    assert (status, body) == (204, b"")
    assert not [line for line in broker.server.lines[start:] if "Error" in line]


def test_a_producer_held_longer_than_its_timeout_goes_on(tmp_path: Path) -> None:
    """Over HTTP as over TCP, a producer the broker stops reading (its memory is full)
    waits for it, however long: its timeout is for connecting and answers, not for a
    send the broker holds."""
    server = _broker(
        tmp_path,
        '[server]\nstore = "memory"\nmemory_high_watermark = "2MiB"\n'
        "block_timeout_ms = 30000\nhttp_poll_ms = 300\n",
    )
    total, body = 3000, bytes(2500)  # ~7.5 MiB: four times what the broker admits at once
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with chute.connect(server.url("http"), timeout=1.0) as conn, conn.session() as s:
                for i in range(total):
                    s.send("queue:held", str(i).encode() + body, persistent=False)
                s.send("queue:held", b"end")  # answered once everything before it was read
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failure.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        server.server.wait_for_line("producers wait")
        threading.Event().wait(2.5)  # the hold under test: over twice the producer's timeout
        with chute.connect(server.url("ws")) as conn, conn.session(ack="auto") as s:
            consumer = s.consumer("queue:held")
            got: list[bytes] = []
            for _ in range(total + 1):
                m = consumer.receive(timeout=20)
                assert m is not None, f"stalled after {len(got)} messages: {failure}"
                got.append(m.body[: -len(body)] if len(m.body) > len(body) else m.body)
        assert got == [str(i).encode() for i in range(total)] + [b"end"]
    finally:
        producer.join(30)
        server.server.stop()
    assert not failure


def test_delete_ends_the_session(broker: Broker) -> None:
    tunnel = Tunnel(broker.http)
    tunnel.login()
    status, _, _ = tunnel.request("DELETE", f"/chute/{tunnel.sid}")
    assert status == 204
    status, _, _ = tunnel.poll()
    assert status == 410
    assert tunnel.post(encode_packet(p.Ping(), correlation_id=3)) == 404


def test_a_poller_that_does_not_poll_is_delivered_a_bounded_amount(broker: Broker) -> None:
    """A consumer granting 1,000 messages of 32 KiB (32 MiB) but not polling: the broker
    stops delivering once ~1 MiB waits for it, and goes on as it polls (this raw client
    never acks: all 300 end up delivered and in flight)."""
    queue = "queue:http.slow"
    with chute.connect(broker.url("ws")) as conn:
        with conn.session() as session:
            for _ in range(300):
                session.send(queue, b"x" * 32768, persistent=False)
        tunnel = Tunnel(broker.http)
        tunnel.login()
        tunnel.post(
            encode_packet(p.SessionOpen(1, p.SessionAckMode.AUTO), callback_id=1)
            + encode_packet(p.ConsumerOpen(1, 5, queue, prefetch=1000), correlation_id=2)
        )
        inflight = conn.stat(queue)["destinations"][0]["inflight"]
        assert 0 < inflight <= 80  # 1 MiB of deliveries, and the write under way
        delivered = 0
        while delivered < 300:
            delivered += sum(isinstance(d, p.Deliver) for d in tunnel.packets(1))
        assert delivered == 300  # as it polled, the rest of its credit was used
        assert conn.stat(queue)["destinations"][0]["inflight"] == 300


def test_a_session_whose_client_went_away_ends_and_gives_its_messages_back(
    broker: Broker, tmp_path: Path
) -> None:
    queue = "queue:http.gone"
    with chute.connect(broker.url("http")) as conn, conn.session() as session:
        session.send(queue, "unacked")
        start = len(broker.server.lines)
        script = textwrap.dedent(
            f"""
            import chute, sys, time
            conn = chute.connect({broker.url("http")!r})
            consumer = conn.session(ack="client").consumer({queue!r})
            message = consumer.receive(timeout=10)
            print("got", message.text, flush=True)
            time.sleep(60)
            """
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "got unacked"
        finally:
            os.kill(child.pid, signal.SIGKILL)  # no DELETE, no close: it is gone
            child.wait()
        message = session.consumer(queue).receive(timeout=TIMEOUT)  # after the 3 s timeout
        assert message is not None
        assert message.text == "unacked"
        assert message.redelivered
        broker.server.wait_for_line("no request for 3 s", start=start)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    started = _broker(
        tmp_path_factory.mktemp("guarded"),
        textwrap.dedent(
            """
            [server]
            http_poll_ms = 300
            [users.alice]
            password = "pw"
            roles = ["writer"]
            [roles.writer]
            send = ["queue:ok.*"]
            consume = ["queue:ok.*"]
            create = ["queue:ok.*"]
            """
        ),
    )
    yield started
    started.server.stop()


@pytest.mark.parametrize("scheme", ["ws", "http"])
def test_the_same_logins_and_permissions_as_every_other_way_in(
    guarded: Broker, scheme: str
) -> None:
    url = guarded.url(scheme)
    with pytest.raises(AuthenticationFailed):
        chute.connect(url, login="alice", passcode="wrong", timeout=TIMEOUT)
    with pytest.raises(AuthenticationFailed):
        chute.connect(url, timeout=TIMEOUT)  # no anonymous once there are users
    with chute.connect(url, login="alice", passcode="pw") as conn, conn.session() as session:
        session.send(f"queue:ok.{scheme}", "fine")
        assert session.consumer(f"queue:ok.{scheme}").receive(timeout=TIMEOUT) is not None
        with pytest.raises(AccessDenied):
            session.send("queue:secret", "no")


def test_sessions_count_against_the_connection_limits(tmp_path: Path) -> None:
    limited = _broker(tmp_path, "[server]\nmax_connections = 2\n")
    try:
        tunnel = Tunnel(limited.http)  # its HTTP connection is one
        tunnel.open()  # the session is the second
        status, _, body = tunnel.request("POST", "/chute")
        assert status == 503
        assert b"max_connections" in body
        tunnel.request("DELETE", f"/chute/{tunnel.sid}")
        tunnel.open()  # the first one's place is free again
    finally:
        limited.server.stop()


def test_a_session_that_never_logs_in_ends_at_the_login_deadline(tmp_path: Path) -> None:
    strict = _broker(tmp_path, "[server]\nlogin_timeout_ms = 1000\nhttp_poll_ms = 300\n")
    try:
        tunnel = Tunnel(strict.http)
        tunnel.open()
        statuses: list[int] = []
        codec = PacketCodec()
        for _ in range(100):
            tunnel = _fresh(tunnel)  # the HTTP connection has its own deadline too
            status, _, body = tunnel.poll()
            statuses.append(status)
            if status == 200:
                codec.receive_data(body)
            if status == 410:
                break
        assert statuses[-1] == 410
        item = codec.next_packet()
        assert not isinstance(item, NeedData)
        assert isinstance(item[1], p.Error)
        assert item[1].code == "login-timeout"
    finally:
        strict.server.stop()


def _fresh(tunnel: Tunnel) -> Tunnel:
    """The same session on a new HTTP connection."""
    fresh = Tunnel(tunnel.port)
    fresh.sid, fresh.seq, fresh.ack = tunnel.sid, tunnel.seq, tunnel.ack
    tunnel.http.close()
    return fresh


@pytest.mark.parametrize(("sender", "receiver"), [("http", "ws"), ("ws", "http")])
def test_the_cli_sends_and_receives_over_the_http_port(
    broker: Broker, sender: str, receiver: str
) -> None:
    queue = f"queue:http.cli.{sender}"
    cli = [sys.executable, "-m", "chute.cli"]
    subprocess.run(
        [*cli, "send", "--url", broker.url(sender), queue, "from the cli"],
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [*cli, "receive", "--url", broker.url(receiver), "--count", "1", queue],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "from the cli" in out


class FrozenRelay:
    """A TCP relay to the broker's HTTP port that can stop passing bytes while it keeps
    every connection open: a broker gone silent behind a network that says nothing."""

    def __init__(self, port: int) -> None:
        self._upstream = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._flowing.clear()

    def close(self) -> None:
        self._flowing.set()
        for sock in (self._listener, *self._sockets):
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._upstream))
            self._sockets += (client, upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()  # frozen: held here, the connection stays open
                sink.sendall(data)
        except OSError:
            pass


@pytest.mark.parametrize("client", ["blocking", "asyncio"])
def test_a_broker_gone_silent_ends_the_connection_with_a_clear_error(
    broker: Broker, client: str
) -> None:
    # The broker answers every poll within http_poll_ms (300 ms here): a poll not
    # answered well after that means the broker or the way to it is gone, even if no
    # connection was ever closed.
    relay = FrozenRelay(broker.http)
    url = f"http://127.0.0.1:{relay.port}/chute"
    runner = sync_aio.LoopThread() if client == "asyncio" else None
    conn = (
        chute.connect(url, timeout=2)
        if runner is None
        else sync_aio.connect(runner, url, timeout=2)
    )
    try:
        session = conn.session()
        queue = f"queue:http.silent.{client}"  # the other's unacked message comes back
        consumer = session.consumer(queue)
        session.send(queue, "before")
        assert consumer.receive(timeout=TIMEOUT) is not None
        relay.freeze()
        started = time.monotonic()
        with pytest.raises(ConnectError) as failed:
            consumer.receive(timeout=25)
        assert time.monotonic() - started < 20
        assert "answered no poll" in str(failed.value), failed.value
    finally:
        relay.close()
        conn.close()
        if runner is not None:
            runner.close()
