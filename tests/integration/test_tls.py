"""The native protocol over TLS (``chutes://``) against a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import chute
import chute.aio
from chute.errors import ConnectError

from .conftest import ChuteServer, free_port, start_server


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(tmp_path: Path, ca: trustme.CA) -> Iterator[tuple[ChuteServer, str, Path]]:
    cert = ca.issue_cert("localhost", "127.0.0.1")
    pem = tmp_path / "broker.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    port = free_port()
    server = start_server(tmp_path, "--tls-port", str(port), "--tls-cert", str(pem))
    yield server, f"chutes://127.0.0.1:{port}", ca_file
    server.stop()


def test_a_blocking_client_sends_and_receives_over_tls(
    tls_server: tuple[ChuteServer, str, Path],
) -> None:
    server, url, ca_file = tls_server
    body = b"\x00secret\xff" * 10_000  # bigger than one TLS record
    with chute.connect(url, tls_ca=str(ca_file)) as conn, conn.session(ack="client") as s:
        for i in range(200):
            s.send("queue:tls", body + str(i).encode())
        c = s.consumer("queue:tls", prefetch=50)
        got = []
        for _ in range(200):
            m = c.receive(timeout=10)
            assert m is not None
            got.append(m.body)
            m.ack()
    assert got == [body + str(i).encode() for i in range(200)]
    with chute.connect(server.url) as plain, plain.session() as s:  # same broker, plain TCP
        s.send("queue:tls", b"plain")
    with chute.connect(url, tls_ca=str(ca_file)) as conn, conn.session() as s:
        m = s.consumer("queue:tls").receive(timeout=10)
        assert m is not None
        assert m.body == b"plain"


def test_the_asyncio_client_speaks_tls_too(tls_server: tuple[ChuteServer, str, Path]) -> None:
    _, url, ca_file = tls_server

    async def run() -> bytes:
        async with chute.aio.connect(url, tls_ca=str(ca_file)) as conn, conn.session() as s:
            await s.send("queue:atls", b"hello")
            c = await s.consumer("queue:atls")
            m = await c.receive(timeout=10)
            assert m is not None
            return m.body

    assert asyncio.run(run()) == b"hello"


def test_an_untrusted_certificate_is_refused_clearly(
    tls_server: tuple[ChuteServer, str, Path],
) -> None:
    _, url, _ = tls_server
    with pytest.raises(ConnectError, match="TLS handshake"):
        chute.connect(url)  # the system's trust store does not know this CA
    with chute.connect(url, tls_verify=False) as conn:  # testing only: no check
        assert conn.connection_id


def test_a_tls_port_without_a_certificate_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="tls_cert"):
        start_server(tmp_path, "--tls-port", str(free_port()))
