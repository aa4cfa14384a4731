"""Hostile bytes over real sockets at a ``chute serve``: each connection gets an ERROR
frame or a close, never a hang, and the broker and a bystander client carry on.

The codec's own fuzz test (tests/unit/stomp/test_codec.py) proves that garbage
raises nothing but ``RemoteProtocolError``; this one proves the driver turns
that into an ERROR and a close, over TCP, for every shape of bad input.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT, Client

MAX_FRAME = 64 << 10
CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    tmp = tmp_path_factory.mktemp("stomp-fuzz")
    config = tmp / "chute.toml"
    config.write_text(f"[server]\nmax_packet_size = {MAX_FRAME}\n")
    port = free_port()
    srv = start_server(tmp, "--config", str(config), "--stomp-port", str(port))
    srv.stomp_port = port  # type: ignore[attr-defined]
    yield srv
    assert srv.process.poll() is None, "the broker died:\n" + srv.output
    assert srv.stop() == 0
    assert "Traceback" not in srv.output, srv.output


@pytest.fixture(scope="module")
def port(server: ChuteServer) -> int:
    p: int = server.stomp_port  # type: ignore[attr-defined]
    return p


@pytest.fixture(scope="module")
def bystander(port: int) -> Iterator[Client]:
    client = Client(port)
    client.conn.subscribe("/queue/fuzz.bystander", id="s", receipt="sub")
    client.receipt("sub")
    yield client
    client.close()


def _still_works(client: Client, server: ChuteServer, tag: str) -> None:
    assert server.process.poll() is None, "the broker died:\n" + server.output
    client.conn.send("/queue/fuzz.bystander", tag.encode(), receipt=tag)
    client.receipt(tag)
    assert client.message().body == tag.encode()


def _exchange(port: int, data: bytes, *, connect: bool = True) -> bytes:
    """Send ``data`` (after a CONNECT), half-close, and read until the broker closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        try:
            sock.sendall((CONNECT if connect else b"") + data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker already refused and closed: what it sent is still readable
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return received


def _error_of(received: bytes) -> bytes:
    """The ERROR frame after the CONNECTED one (asserting both are there)."""
    assert received.startswith(b"CONNECTED\n"), received[:200]
    _, _, rest = received.partition(b"\x00")
    assert rest.startswith(b"ERROR\n"), received[:400]
    return rest


HOSTILE = {
    "huge header line": b"SEND\ndestination:/queue/f\nx:" + b"a" * 10_000 + b"\n\n\x00",
    "too many headers": b"SEND\ndestination:/queue/f\n"
    + b"".join(b"h%d:v\n" % i for i in range(300))
    + b"\n\x00",
    "bad escape": b"SEND\ndestination:/queue/f\nx:a\\qb\n\n\x00",
    "escape at the end": b"SEND\ndestination:/queue/f\nx:a\\\n\n\x00",
    "header without colon": b"SEND\ndestination:/queue/f\nnocolon\n\n\x00",
    "content-length not a number": b"SEND\ndestination:/queue/f\ncontent-length:abc\n\nx\x00",
    "negative content-length": b"SEND\ndestination:/queue/f\ncontent-length:-1\n\nx\x00",
    "content-length not ending at NUL": b"SEND\ndestination:/queue/f\ncontent-length:2\n\nabcd\x00",
    "content-length over the limit": b"SEND\ndestination:/queue/f\ncontent-length:%d\n\n"
    % (MAX_FRAME * 4),
    "oversize body without content-length": b"SEND\ndestination:/queue/f\n\n"
    + b"x" * (MAX_FRAME + 10),
    "non-UTF-8 header": b"SEND\ndestination:/queue/f\nx:\xff\xfe\n\n\x00",
    "non-UTF-8 command": b"S\xffND\n\n\x00",
    "unknown command": b"EXPLODE\n\n\x00",
    "server command from a client": b"MESSAGE\ndestination:/queue/f\n\n\x00",
    "missing destination": b"SEND\n\nbody\x00",
    "bad destination": b"SEND\ndestination:/queue/../../etc\n\n\x00",
    "ack of nothing": b"ACK\nid:999.999\n\n\x00",
    "second CONNECT": CONNECT,
    "body on SUBSCRIBE": b"SUBSCRIBE\nid:1\ndestination:/queue/f\n\nbody\x00",
    "bad selector": b"SUBSCRIBE\nid:1\ndestination:/queue/f\nselector:a = = 1\n\n\x00",
    "CR without LF": b"\r\rSEND\n\n\x00",
}


@pytest.mark.parametrize("data", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_frame_gets_an_error_and_a_close(
    port: int, server: ChuteServer, bystander: Client, data: bytes
) -> None:
    error = _error_of(_exchange(port, data))
    assert b"\nmessage:" in error.split(b"\n\n", 1)[0]
    _still_works(bystander, server, "after-frame")


@pytest.mark.parametrize(
    "data",
    [b"SEND\ndestination:/queue/f\n\nno NUL before EOF", b"SEND\ndestination:/qu", b"SEND"],
    ids=["body", "header", "command"],
)
def test_eof_inside_a_frame_closes(
    port: int, server: ChuteServer, bystander: Client, data: bytes
) -> None:
    received = _exchange(port, data)
    assert received.startswith(b"CONNECTED\n")  # then an ERROR or only the close
    _still_works(bystander, server, "after-eof")


def test_frames_before_connect_are_refused(port: int, server: ChuteServer) -> None:
    received = _exchange(port, b"SEND\ndestination:/queue/f\n\nx\x00", connect=False)
    assert received.startswith(b"ERROR\n")
    received = _exchange(port, b"\x00\x01\x02\xff" * 100, connect=False)
    assert received == b"" or received.startswith(b"ERROR\n")


FRAGMENTS = [
    b"SEND\n",
    b"SUBSCRIBE\n",
    b"ACK\n",
    b"BEGIN\n",
    b"COMMIT\n",
    b"destination:/queue/fuzz.random\n",
    b"destination:/topic/fuzz.random\n",
    b"id:1\n",
    b"transaction:t\n",
    b"content-length:3\n",
    b"content-length:99999999\n",
    b"receipt:r\n",
    b"\\",
    b"\\n",
    b"\\x",
    b":",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"abc",
]
garbage = st.one_of(
    st.binary(max_size=500),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=garbage)
def test_random_garbage_never_hangs_or_hurts_the_broker(
    port: int, server: ChuteServer, data: bytes
) -> None:
    received = _exchange(port, data)  # returns once the broker closed the connection
    assert received.startswith(b"CONNECTED\n")
    assert server.process.poll() is None, server.output


def test_bystander_survived_everything(port: int, server: ChuteServer, bystander: Client) -> None:
    _still_works(bystander, server, "at-the-end")
    assert "Traceback" not in server.output
