"""What a TLS client sends with or right after the end of its handshake reaches the
protocol, against a real ``chute serve``: a STOMP CONNECT or an HTTP upgrade in the
very TCP write that carries the client's Finished (TLS 1.2 and 1.3), or cut into
many records; and the login deadline's log line counts the bytes a client sent
after its handshake.

The clients here drive ``ssl.SSLObject`` over memory buffers, so each test decides
exactly which bytes share a TCP segment: a stock client writes its Finished and
its first request one after the other, and whether they share a segment is luck.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT

CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00"
ROUNDS = 30
"""Connections per case: each a separate handshake, so the hand-over's timing varies."""


class MemoryClient:
    """A TLS client whose TCP writes are its own to cut: ``ssl.SSLObject`` over memory BIOs."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def handshake(self) -> None:
        """Run the handshake up to the client's last flight, which stays unsent."""
        while True:
            try:
                self.tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                pending = self.outgoing.read()
                if pending:
                    self.sock.sendall(pending)
                data = self.sock.recv(65536)
                assert data, "the broker closed the connection during the handshake"
                self.incoming.write(data)

    def write(self, data: bytes, *, records: int = 1) -> None:
        """Encrypt ``data`` in ``records`` records and send them, with anything of the
        handshake still unsent, in one TCP write."""
        size = -(-len(data) // records)
        for start in range(0, len(data), size):
            self.tls.write(data[start : start + size])
        self.sock.sendall(self.outgoing.read())

    def read_until(self, marker: bytes) -> bytes:
        """What the broker answers, up to ``marker`` (b"" if it closes before)."""
        got = b""
        while marker not in got:
            data = self.sock.recv(65536)
            if not data:
                return got
            self.incoming.write(data)
            try:
                while chunk := self.tls.read(65536):
                    got += chunk
            except ssl.SSLWantReadError:
                continue
            except ssl.SSLZeroReturnError:
                return got
            return got  # the broker closed its side
        return got

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The broker's certificate file, and the PEM of the CA that signed it."""
    ca = trustme.CA()
    cert = tmp_path_factory.mktemp("pki") / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    return cert, ca.cert_pem.bytes().decode()


@pytest.fixture(scope="module")
def broker(
    pki: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ChuteServer, int, int]]:
    """(server, its STOMP TLS port, its HTTPS port)."""
    tmp = tmp_path_factory.mktemp("broker")
    stomp_tls, https = free_port(), free_port()
    server = start_server(
        tmp,
        *("--tls-cert", str(pki[0]), "--stomp-tls-port", str(stomp_tls)),
        *("--http-port", str(https), "--http-tls"),
    )
    yield server, stomp_tls, https
    assert server.stop() == 0, server.output


def _context(pki: tuple[Path, str], version: str) -> ssl.SSLContext:
    """A client context trusting the test CA, for TLS ``version`` at most."""
    context = ssl.create_default_context(cadata=pki[1])
    if version == "1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


@pytest.mark.parametrize("version", ["1.2", "1.3"])
@pytest.mark.parametrize("records", [1, 7], ids=["one-record", "seven-records"])
def test_a_connect_in_the_write_that_ends_the_handshake_is_answered(
    broker: tuple[ChuteServer, int, int],
    pki: tuple[Path, str],
    version: str,
    records: int,
) -> None:
    _, stomp_tls, _ = broker
    context = _context(pki, version)
    for _ in range(ROUNDS):
        client = MemoryClient(stomp_tls, context)
        try:
            client.handshake()
            assert client.tls.version() == f"TLSv{version}"
            client.write(CONNECT, records=records)  # with the client's Finished
            assert client.read_until(b"\x00").startswith(b"CONNECTED\n")
        finally:
            client.close()


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_a_websocket_upgrade_in_the_write_that_ends_the_handshake_is_answered(
    broker: tuple[ChuteServer, int, int], pki: tuple[Path, str], version: str
) -> None:
    _, _, https = broker
    context = _context(pki, version)
    upgrade = (
        f"GET /stomp HTTP/1.1\r\nHost: 127.0.0.1:{https}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n"
    ).encode()
    for _ in range(ROUNDS):
        client = MemoryClient(https, context)
        try:
            client.handshake()
            client.write(upgrade)  # with the client's Finished
            assert client.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101")
        finally:
            client.close()


def test_the_login_deadline_counts_what_a_client_sent_after_its_handshake(
    tmp_path: Path, pki: tuple[Path, str]
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text("[server]\nlogin_timeout_ms = 300\n")
    stomp_tls = free_port()
    server = start_server(
        tmp_path,
        *("--config", str(config), "--tls-cert", str(pki[0]), "--stomp-tls-port", str(stomp_tls)),
    )
    try:
        client = MemoryClient(stomp_tls, _context(pki, "1.3"))
        try:
            client.handshake()
            client.write(b"CONNECT\naccept-version:1.2\n")  # a frame never ended: 27 bytes
            client.write(b"host:/\nlogin:bob\n")  # 17 more, later
            assert b"login-timeout" in client.read_until(b"\x00")
        finally:
            client.close()
        line = server.wait_for_line("do not log in within 0.3 s")
        assert "(past its TLS handshake, 44 bytes since)" in line, line
    finally:
        assert server.stop() == 0, server.output
