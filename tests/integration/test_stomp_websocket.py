"""STOMP over WebSocket on the HTTP port, against a ``chute serve`` subprocess.

stomp.py's ``WSStompConnection`` drives the usual flows; websocket-client sends
raw frames where the test is about the WebSocket framing itself. The broker
has users configured, so every test also shows that logins are checked the
same way as on the TCP port.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import stomp
import websocket

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT, Client

LOGIN = {"username": "alice", "passcode": "secret"}


@dataclass
class Ports:
    stomp: int
    http: int


class WsClient(Client):
    """A :class:`Client` whose connection is stomp.py's WebSocket one."""

    def __init__(
        self, port: int, *, path: str = "/stomp", binary: bool = False, **login: str
    ) -> None:
        conn = stomp.WSStompConnection(
            [("127.0.0.1", port)],
            ws_path=path,
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            binary_mode=binary,
            auto_decode=False,
            reconnect_attempts_max=1,
        )
        self._listen(conn, **(login or LOGIN))


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    tmp = tmp_path_factory.mktemp("stomp-ws")
    config = tmp / "chute.toml"
    config.write_text('[users.alice]\npassword = "secret"\nroles = ["admin"]\n')
    p = Ports(free_port(), free_port())
    srv: ChuteServer = start_server(
        tmp, "--config", str(config), "--stomp-port", str(p.stomp), "--http-port", str(p.http)
    )
    assert f"http 127.0.0.1:{p.http}" in srv.output
    yield p
    assert srv.stop() == 0, srv.output


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def _raw(ports: Ports, path: str = "/stomp") -> websocket.WebSocket:
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{ports.http}{path}", timeout=TIMEOUT, subprotocols=["v12.stomp"]
    )
    return ws


def _text(ws: websocket.WebSocket) -> str:
    data = ws.recv()
    return data.decode() if isinstance(data, bytes) else data


def _read_until_close(ws: websocket.WebSocket) -> bytes:
    """Every data message until the server closes."""
    data = b""
    while True:
        opcode, payload = ws.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return data
        if opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            data += payload


def test_queue_round_trip_with_receipts_and_acks(ports: Ports, clients: list[Client]) -> None:
    c = WsClient(ports.http)
    clients.append(c)
    c.conn.subscribe("/queue/ws.plain", id="s", ack="client-individual", receipt="sub")
    c.receipt("sub")
    c.conn.send("/queue/ws.plain", "héllo".encode(), receipt="sent", colour="blue")
    c.receipt("sent")  # persistent: after the journal's sync, as over TCP
    frame = c.message()
    assert frame.body == "héllo".encode()
    assert frame.headers["colour"] == "blue"
    c.conn.ack(frame.headers["ack"], receipt="acked")
    c.receipt("acked")


def test_binary_body_travels_in_binary_messages(ports: Ports, clients: list[Client]) -> None:
    c = WsClient(ports.http, path="/ws", binary=True)  # /ws is the other endpoint
    clients.append(c)
    c.conn.subscribe("/queue/ws.binary", id="s")
    body = bytes(range(256)) + b"\x00\xff\xfe"
    c.conn.send("/queue/ws.binary", body, content_type="application/octet-stream")
    assert c.message().body == body


def test_websocket_and_tcp_clients_share_the_broker(ports: Ports, clients: list[Client]) -> None:
    tcp = Client(ports.stomp, **LOGIN)
    ws = WsClient(ports.http)
    clients += [tcp, ws]
    tcp.conn.subscribe("/topic/ws.mixed", id="t", receipt="t")
    tcp.receipt("t")
    ws.conn.subscribe("/topic/ws.mixed", id="w", receipt="w")
    ws.receipt("w")
    ws.conn.send("/topic/ws.mixed", b"from ws", persistent="false")
    tcp.conn.send("/topic/ws.mixed", b"from tcp", persistent="false")
    assert {tcp.message().body, tcp.message().body} == {b"from ws", b"from tcp"}
    assert {ws.message().body, ws.message().body} == {b"from ws", b"from tcp"}


def test_subprotocol_is_negotiated_and_frames_may_span_messages(ports: Ports) -> None:
    ws = _raw(ports)
    try:
        assert ws.getsubprotocol() == "v12.stomp"
        ws.send("CONNECT\naccept-version:1.2\nlogin:alice\npasscode:secret\n\n\x00")
        assert _text(ws).startswith("CONNECTED\nversion:1.2\n")
        # two frames in one message, then one frame cut across two messages
        ws.send(
            "SUBSCRIBE\nid:s\ndestination:/queue/ws.raw\nreceipt:sub\n\n\x00"
            "SEND\ndestination:/queue/ws.raw\npersistent:false\n\none\x00"
        )
        ws.send("SEND\ndestination:/queue/ws.ra")
        ws.send_binary(b"w\npersistent:false\n\ntwo\x00")
        received = ""
        while received.count("MESSAGE\n") < 2:
            received += _text(ws)
        assert "RECEIPT\nreceipt-id:sub\n" in received
        assert received.index("\n\none\x00") < received.index("\n\ntwo\x00")
    finally:
        ws.close()


def test_bad_login_and_garbage_get_an_error_then_a_close(ports: Ports) -> None:
    ws = _raw(ports)
    ws.send("CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wrong\n\n\x00")
    data = _read_until_close(ws)
    assert data.startswith(b"ERROR\n")
    assert b"login or passcode rejected" in data
    ws.close()

    ws = _raw(ports)
    ws.send("CONNECT\naccept-version:1.2\nlogin:alice\npasscode:secret\n\n\x00")
    ws.send_binary(b"\x01\x02garbage\xff\nheader\n\n\x00")
    data = _read_until_close(ws)
    assert data.startswith(b"CONNECTED\n")
    assert b"\x00ERROR\n" in data
    ws.close()


def test_plain_http_get_is_told_to_upgrade(ports: Ports) -> None:
    url = f"http://127.0.0.1:{ports.http}/stomp"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=TIMEOUT)
    assert info.value.code == 426
    assert b"WebSocket" in info.value.read()
