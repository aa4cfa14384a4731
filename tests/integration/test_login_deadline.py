"""What a client that does not log in may cost (issue 13): ``login_timeout_ms`` on every
listener (slowloris included), ``max_login_frame_size`` (a large frame before login is
refused before the broker buffers it), wrong passwords (verified off the loop), and
``idle_timeout_ms``.

Real sockets and a real ``chute serve``. Each closing is logged once per flood, and a
logged-in bystander works throughout.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import trustme

import chute
from chute.passwords import hash_password
from chute.protocol import packets as p
from chute.protocol.spec import HEADER
from chute.protocol.wire import encode_packet

from .conftest import ChuteServer, free_port, start_server
from .hostile import (
    config,
    lines_with,
    native_error,
    raw,
    rss_kib,
    stomp_frames,
    until_closed,
    wait_until,
    websocket,
    ws_header,
    ws_messages,
)

FIFTEEN_MIB = 15 << 20
STOMP_CONNECT = b"CONNECT\naccept-version:1.2\nheart-beat:0,0\n\n\x00"


def _round_trip(conn: chute.Connection, queue: str, body: str) -> None:
    with conn.session() as session:
        session.send(queue, body)
        message = session.consumer(queue).receive(timeout=10)
    assert message is not None
    assert message.text == body


def _until_receipt(sock: socket.socket) -> bytes:
    """What the broker sends until a RECEIPT."""
    answers = b""
    while b"RECEIPT" not in answers:
        chunk = sock.recv(65536)
        assert chunk, answers
        answers += chunk
    return answers


def _trickle(sock: socket.socket, head: bytes) -> tuple[bytes, float]:
    """Send ``head`` then one more byte every 20 ms, never finishing the frame (slowloris),
    until the broker closes; what it sent, and after how many seconds."""
    start = time.monotonic()
    sock.sendall(head)
    sock.settimeout(0.02)  # the pace, and the wait for the broker's word
    answer = b""
    while time.monotonic() - start < 30:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            try:
                sock.send(b"a")
            except OSError:
                break
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        answer += chunk
    return answer, time.monotonic() - start


def test_the_login_deadline_closes_every_kind_of_connection_that_does_not_log_in(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    cert = tmp_path / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    tls, stomp, http = free_port(), free_port(), free_port()
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "login_timeout_ms = 300\n"),
        "--tls-cert",
        str(cert),
        "--tls-port",
        str(tls),
        "--stomp-port",
        str(stomp),
        "--http-port",
        str(http),
    )
    try:
        with chute.connect(server.url) as bystander:
            native = raw(server.port)
            stomp_silent = raw(stomp)
            no_handshake = raw(tls)
            handshake_only = client_tls.wrap_socket(raw(tls), server_hostname="127.0.0.1")
            http_silent = raw(http)
            ws_silent = websocket(http)
            started = time.monotonic()

            assert native_error(until_closed(native)).code == "login-timeout"
            [error] = stomp_frames(until_closed(stomp_silent))
            assert (error.command, error.header("code")) == ("ERROR", "login-timeout")
            assert "server.login_timeout_ms" in (error.header("message") or "")
            assert until_closed(no_handshake) == b""
            assert native_error(until_closed(handshake_only)).code == "login-timeout"
            assert until_closed(http_silent) == b""
            messages = ws_messages(until_closed(ws_silent))
            assert messages[-1][0] == 0x8  # then the WebSocket's close
            [error] = stomp_frames(b"".join(m for op, m in messages if op in (0x1, 0x2)))
            assert error.header("code") == "login-timeout"
            assert time.monotonic() - started < 5  # 300 ms, with room for a slow machine

            answer, took = _trickle(raw(stomp), b"CONNECT\nlogin:")
            [error] = stomp_frames(answer)
            assert error.header("code") == "login-timeout"
            assert took < 5

            _round_trip(bystander, "queue:bystander", "still here")
            assert bystander.stat()["sockets"]["login_timeouts"] == 7
            # a TLS connection waits for the client's close_notify, a second at most
            wait_until(lambda: bystander.stat()["sockets"]["open"] == 1, "only the bystander")
            [warning] = lines_with(server, "do not log in within 0.3 s")
            assert "WARNING" in warning
            assert not lines_with(server, "TLS handshake with")  # the deadline said it all
    finally:
        assert server.stop() == 0, server.output


def _flood(sock: socket.socket, head: bytes) -> None:
    """Announce a 15 MiB frame and send it, until the broker hangs up."""
    chunk = b"x" * (1 << 20)
    try:
        sock.sendall(head)
        for _ in range(FIFTEEN_MIB >> 20):
            sock.sendall(chunk)
    except OSError:
        pass  # refused: the broker closed


def _flooders(server: ChuteServer, stomp: int, http: int) -> list[threading.Thread]:
    native_head = HEADER.pack(FIFTEEN_MIB, p.PROTOCOL_VERSION, 0, 0, 0, 0)
    stomp_head = f"SEND\ndestination:/queue/a\ncontent-length:{FIFTEEN_MIB}\n\n".encode()
    floods = [(raw(server.port), native_head) for _ in range(10)]
    floods += [(raw(stomp), stomp_head) for _ in range(5)]
    floods += [(websocket(http), ws_header(FIFTEEN_MIB)) for _ in range(5)]
    return [threading.Thread(target=_flood, args=flood) for flood in floods]


def test_a_large_frame_before_login_is_refused_before_it_is_buffered(tmp_path: Path) -> None:
    stomp, http = free_port(), free_port()
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "login_timeout_ms = 2000\n"),
        "--stomp-port",
        str(stomp),
        "--http-port",
        str(http),
        "--store",
        "memory",
    )
    try:
        with chute.connect(server.url) as bystander:
            _round_trip(bystander, "queue:warm", "up")
            before = rss_kib(server.process.pid)
            threads = _flooders(server, stomp, http)
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            grown = rss_kib(server.process.pid) - before
            assert grown < 48 << 10, f"the broker grew by {grown} KiB"  # buffered: 300 MiB

            header_only = raw(server.port)
            header_only.sendall(HEADER.pack(FIFTEEN_MIB, p.PROTOCOL_VERSION, 0, 0, 0, 0))
            error = native_error(until_closed(header_only))
            assert error.code == "packet-too-large"
            assert "65536" in error.reason
            stomp_head = raw(stomp)
            stomp_head.sendall(b"SEND\ndestination:/queue/a\ncontent-length:100000\n\n")
            [frame] = stomp_frames(until_closed(stomp_head))
            assert frame.header("code") == "frame-too-large"

            # once logged in, max_packet_size applies (the clients do not wait for CONNECTED)
            send = b"SEND\ndestination:/queue/big\nreceipt:r1\n\n%s\x00" % (b"y" * (1 << 20))
            with raw(stomp) as client:
                client.sendall(STOMP_CONNECT + send)
                assert [f.command for f in stomp_frames(_until_receipt(client))] == [
                    "CONNECTED",
                    "RECEIPT",
                ]
            with websocket(http) as ws:  # over WebSocket too
                ws.sendall(ws_header(len(STOMP_CONNECT)) + STOMP_CONNECT)
                ws.sendall(ws_header(len(send)) + send)
                messages = ws_messages(_until_receipt(ws))
                frames = stomp_frames(b"".join(m for _, m in messages))
                assert [f.command for f in frames] == ["CONNECTED", "RECEIPT"]
            _round_trip(bystander, "queue:bystander", "x" * (1 << 20))
            sockets = bystander.stat()["sockets"]
            assert sockets["protocol_errors_before_login"] == 17
            # WebSockets: read no further, then closed at the login deadline
            assert sockets["held_before_login"] >= 5  # (and the client above, if it was quick)
            assert sockets["login_timeouts"] == 5
            for text in ("broke the protocol before logging in", "do not log in within"):
                [line] = lines_with(server, text)
                assert "WARNING" in line
    finally:
        assert server.stop() == 0, server.output


def test_the_idle_timeout_closes_clients_without_heartbeats(tmp_path: Path) -> None:
    stomp, sink = free_port(), free_port()
    text = f"idle_timeout_ms = 400\n[smq]\nsource_port = 0\nsink_port = {sink}\n"
    server = start_server(tmp_path, "--config", config(tmp_path, text), "--stomp-port", str(stomp))
    try:
        with chute.connect(server.url, heartbeat=1.0) as beating:
            with raw(stomp) as quiet:
                quiet.sendall(STOMP_CONNECT)
                frames = stomp_frames(until_closed(quiet))
            assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
            assert frames[1].header("code") == "idle-timeout"
            assert "server.idle_timeout_ms" in (frames[1].header("message") or "")
            with raw(sink) as smq_sink:
                assert until_closed(smq_sink) == b""
            _round_trip(beating, "queue:beating", "heart-beats keep it")  # older than 400 ms
            wait_until(lambda: beating.stat()["sockets"]["idle_timeouts"] == 2, "2 idle closed")
            [line] = lines_with(server, "sent and received nothing for")
            assert "WARNING" in line
    finally:
        assert server.stop() == 0, server.output


def test_a_flood_of_wrong_passwords_does_not_stall_logged_in_clients(tmp_path: Path) -> None:
    stomp = free_port()
    text = (
        "max_login_failures = 0\n"
        f'[users.alice]\npassword = "{hash_password("right")}"\nroles = ["admin"]\n'
    )
    server = start_server(tmp_path, "--config", config(tmp_path, text), "--stomp-port", str(stomp))
    try:
        with chute.connect(server.url, login="alice", passcode="right") as bystander:
            bystander.stat()
            flood = [raw(server.port) for _ in range(16)]
            wrong = encode_packet(p.Connect(login="alice", passcode="wrong"), 1, 0, 0, 1)
            refusals: list[str] = []
            done = threading.Event()

            def read_refusals() -> None:
                refusals.extend(native_error(until_closed(sock, 60)).code for sock in flood)
                done.set()

            reader = threading.Thread(target=read_refusals)
            started = time.monotonic()
            for sock in flood:
                sock.sendall(wrong)
            reader.start()
            waits = []
            while not done.is_set():
                asked = time.monotonic()
                bystander.stat()
                waits.append(time.monotonic() - asked)
            took = time.monotonic() - started
            reader.join()
            assert refusals == ["authentication-failed"] * 16
            # on the loop, 16 argon2 checks (~0.1 s each) would hold every answer this long
            assert max(waits) < took / 3, (max(waits), took)

            # a login whose check ran elsewhere keeps its order: what followed CONNECT waited
            with raw(stomp) as piped:
                piped.sendall(
                    b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:right\n\n\x00"
                    b"SEND\ndestination:/queue/piped\nreceipt:r1\n\nafter login\x00"
                )
                answers = _until_receipt(piped)
            assert [f.command for f in stomp_frames(answers)] == ["CONNECTED", "RECEIPT"]
            with bystander.session() as session:
                got = session.consumer("queue:piped").receive(timeout=10)
            assert got is not None
            assert got.text == "after login"
    finally:
        assert server.stop() == 0, server.output


def test_the_login_deadline_says_how_far_a_connection_got(tmp_path: Path) -> None:
    # One connection a broker: the first of a flood is the one its log line names.
    ca = trustme.CA()
    cert = tmp_path / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    cases = [
        ("--tls-port", "past its TLS handshake, 0 bytes since"),
        ("--http-port", "a WebSocket on /stomp, not logged in"),
    ]
    for option, stage in cases:
        home = tmp_path / option.strip("-")
        home.mkdir()
        port = free_port()
        server = start_server(
            home,
            "--config",
            config(home, "login_timeout_ms = 300\n"),
            "--tls-cert",
            str(cert),
            option,
            str(port),
        )
        try:
            silent: socket.socket = (
                client_tls.wrap_socket(raw(port), server_hostname="127.0.0.1")
                if option == "--tls-port"
                else websocket(port)
            )
            until_closed(silent)
            warning = server.wait_for_line("do not log in within 0.3 s")
            assert f"({stage})" in warning, warning
        finally:
            assert server.stop() == 0, server.output
