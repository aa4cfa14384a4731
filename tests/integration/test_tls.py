"""TLS on every listener, against real ``chute serve`` subprocesses.

The native protocol (``chutes://``, the blocking and asyncio clients), STOMP
(stomp.py's ``set_ssl``), STOMP over WSS (stomp.py's ``WSStompConnection``) and
HTTPS, with and without client certificates; what a client that speaks plain
text to a TLS port, or TLS to a plain one, is told; and that the broker logs one
line for it and goes on serving. Certificates come from ``trustme``.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stomp
import trustme
import websocket
from stomp.exception import ConnectFailedException

import chute
import chute.aio
from chute.errors import AccessDenied, AuthenticationFailed, ConnectError

from . import sync_aio
from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT, Client

CAROLS = "s3cr:t@/%é"  # a passcode that a URL must percent-encode
USERS = "".join(
    f'[users.{user}]\npassword = "{password}"\nroles = ["{user}"]\n'
    f'[roles.{user}]\nsend = ["queue:{user}.*"]\nconsume = ["queue:{user}.*"]\n'
    f'create = ["queue:{user}.*"]\n'
    for user, password in (("alice", "secret"), ("bob", "pw"), ("carol", CAROLS))
)
"""Each user may use only the queues named after them: what a connection may do shows
whom it acts for."""


@dataclass
class Pki:
    """The files a TLS test needs (PEM; each certificate file holds its key too)."""

    ca: Path  # signs the broker's certificate and the clients'
    broker: Path
    alice: Path  # a client certificate with CN=alice
    stranger: Path  # CN=alice too, but from another CA


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Pki:
    tmp = tmp_path_factory.mktemp("pki")
    files = Pki(tmp / "ca.pem", tmp / "broker.pem", tmp / "alice.pem", tmp / "stranger.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(files.broker)
    )
    ca.issue_cert("alice", common_name="alice").private_key_and_cert_chain_pem.write_to_path(
        str(files.alice)
    )
    other = trustme.CA()
    other.issue_cert("alice", common_name="alice").private_key_and_cert_chain_pem.write_to_path(
        str(files.stranger)
    )
    return files


@dataclass
class Broker:
    """A broker with users, every listener, and client certificates in some mode."""

    server: ChuteServer
    native: int
    tls: int
    stomp: int
    stomp_tls: int
    http: int

    @property
    def url(self) -> str:
        return f"chutes://127.0.0.1:{self.tls}"


def _broker(tmp: Path, pki: Pki, client_certs: str, *, http_tls: bool) -> Broker:
    config = tmp / "chute.toml"
    config.write_text(
        f"[server]\ntls_ca = {str(pki.ca)!r}\ntls_client_certs = {client_certs!r}\n"
        f"http_tls = {'true' if http_tls else 'false'}\n{USERS}"
    )
    native, tls, stomp_port, stomp_tls, http_port = (free_port() for _ in range(5))
    server = start_server(
        tmp,
        "--config",
        str(config),
        "--tls-cert",
        str(pki.broker),
        "--tls-port",
        str(tls),
        "--stomp-port",
        str(stomp_port),
        "--stomp-tls-port",
        str(stomp_tls),
        "--http-port",
        str(http_port),
        port=native,
    )
    return Broker(server, native, tls, stomp_port, stomp_tls, http_port)


@pytest.fixture(scope="module")
def optional(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Broker]:
    """Client certificates optional; HTTPS and WSS on the HTTP port."""
    b = _broker(tmp_path_factory.mktemp("optional"), pki, "optional", http_tls=True)
    yield b
    assert b.server.stop() == 0, b.server.output
    assert "Traceback" not in b.server.output, b.server.output


@pytest.fixture(scope="module")
def required(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Broker]:
    """Client certificates required; plain HTTP on the HTTP port."""
    b = _broker(tmp_path_factory.mktemp("required"), pki, "required", http_tls=False)
    yield b
    assert b.server.stop() == 0, b.server.output
    assert "Traceback" not in b.server.output, b.server.output


def _other(user: str) -> str:
    return "bob" if user == "alice" else "alice"


def _acts_as(conn: chute.Connection, user: str) -> None:
    """Show that ``conn`` acts for ``user``: it may use their queues (which no other
    user's role grants), not the other's."""
    with conn.session() as s:
        s.send(f"queue:{user}.check", b"to " + user.encode())
        m = s.consumer(f"queue:{user}.check").receive(timeout=TIMEOUT)
        assert m is not None
        assert m.body == b"to " + user.encode()
    with conn.session() as s, pytest.raises(AccessDenied):
        s.send(f"queue:{_other(user)}.check", b"not mine")


# -- the native protocol ---------------------------------------------------------------------


def test_a_blocking_client_sends_and_receives_over_tls(optional: Broker, pki: Pki) -> None:
    body = b"\x00secret\xff" * 10_000  # bigger than one TLS record
    login: dict[str, Any] = {"login": "alice", "passcode": "secret"}
    with (
        chute.connect(optional.url, tls_ca=str(pki.ca), **login) as conn,
        conn.session(ack="client") as s,
    ):
        for i in range(200):
            s.send("queue:alice.tls", body + str(i).encode())
        c = s.consumer("queue:alice.tls", prefetch=50)
        got = []
        for _ in range(200):
            m = c.receive(timeout=10)
            assert m is not None
            got.append(m.body)
            m.ack()
    assert got == [body + str(i).encode() for i in range(200)]
    plain_url = f"chute://127.0.0.1:{optional.native}"
    with chute.connect(plain_url, **login) as plain, plain.session() as s:  # same broker
        s.send("queue:alice.tls", b"plain")
    with chute.connect(optional.url, tls_ca=str(pki.ca), **login) as conn, conn.session() as s:
        m = s.consumer("queue:alice.tls").receive(timeout=10)
        assert m is not None
        assert m.body == b"plain"


def test_the_asyncio_client_speaks_tls_and_presents_certificates_too(
    optional: Broker, pki: Pki
) -> None:
    async def run() -> bytes:
        async with (
            chute.aio.connect(optional.url, tls_ca=str(pki.ca), tls_cert=str(pki.alice)) as conn,
            conn.session() as s,
        ):
            await s.send("queue:alice.aio", b"hello")
            c = await s.consumer("queue:alice.aio")
            m = await c.receive(timeout=10)
            assert m is not None
            return m.body

    assert asyncio.run(run()) == b"hello"


def test_an_untrusted_broker_certificate_is_refused_clearly(optional: Broker) -> None:
    start = len(optional.server.lines)
    with pytest.raises(ConnectError, match="TLS handshake failed: the broker's certificate"):
        chute.connect(optional.url)  # the system's trust store does not know this CA
    line = optional.server.wait_for_line("native-tls: TLS handshake", start=start)
    assert "the client refused the handshake (TLSV1_ALERT_UNKNOWN_CA)" in line
    with chute.connect(optional.url, tls_verify=False, login="bob", passcode="pw") as conn:
        assert conn.connection_id  # testing only: no check


def test_a_client_certificate_logs_in_as_its_user_without_a_passcode(
    optional: Broker, pki: Pki
) -> None:
    with chute.connect(optional.url, tls_ca=str(pki.ca), tls_cert=str(pki.alice)) as conn:
        _acts_as(conn, "alice")


@pytest.mark.parametrize("scheme", ["wss", "https"])
def test_a_client_certificate_names_its_user_over_the_http_port_too(
    optional: Broker, pki: Pki, scheme: str
) -> None:
    """The native protocol over a WebSocket or plain requests on the HTTPS port: the
    certificate presented there logs the client in, as on the TLS port."""
    url = f"{scheme}://127.0.0.1:{optional.http}/chute"
    with chute.connect(url, tls_ca=str(pki.ca), tls_cert=str(pki.alice)) as conn:
        _acts_as(conn, "alice")
    with chute.connect(url, tls_ca=str(pki.ca), login="bob", passcode="pw") as conn:
        _acts_as(conn, "bob")
    plain = url.replace(scheme, scheme[:-1], 1)
    with pytest.raises(ConnectError, match=f"if the port speaks TLS, use {scheme}://"):
        chute.connect(plain, timeout=5)
    with pytest.raises(ConnectError, match=r"certificate did not verify.*give the CA"):
        chute.connect(url, timeout=5)  # the system's store does not know this CA
    runner = sync_aio.LoopThread()
    try:
        with pytest.raises(ConnectError, match=f"if the port speaks TLS, use {scheme}://"):
            sync_aio.connect(runner, plain, timeout=5)
        with pytest.raises(ConnectError, match=r"certificate did not verify.*give the CA"):
            sync_aio.connect(runner, url, timeout=5)
    finally:
        runner.close()


def test_with_optional_certificates_a_client_without_one_logs_in_with_a_password(
    optional: Broker, pki: Pki
) -> None:
    with chute.connect(optional.url, tls_ca=str(pki.ca), login="bob", passcode="pw") as conn:
        _acts_as(conn, "bob")
    with pytest.raises(AuthenticationFailed):
        chute.connect(optional.url, tls_ca=str(pki.ca))  # no certificate, no password


def test_a_login_naming_another_user_than_the_certificate_is_refused(
    optional: Broker, pki: Pki
) -> None:
    with pytest.raises(AuthenticationFailed):
        chute.connect(
            optional.url, tls_ca=str(pki.ca), tls_cert=str(pki.alice), login="bob", passcode="pw"
        )
    with chute.connect(  # naming the certificate's own user is fine
        optional.url, tls_ca=str(pki.ca), tls_cert=str(pki.alice), login="alice"
    ) as conn:
        _acts_as(conn, "alice")


def test_a_certificate_from_another_ca_fails_the_handshake_even_when_optional(
    optional: Broker, pki: Pki
) -> None:
    start = len(optional.server.lines)
    with pytest.raises(ConnectError, match="client certificate"):
        chute.connect(optional.url, tls_ca=str(pki.ca), tls_cert=str(pki.stranger))
    line = optional.server.wait_for_line("native-tls: TLS handshake", start=start)
    assert "did not verify against server.tls_ca" in line


def test_required_certificates_refuse_a_client_without_one_or_with_another_cas(
    required: Broker, pki: Pki
) -> None:
    server = required.server
    start = len(server.lines)
    with pytest.raises(ConnectError, match="client certificate"):
        chute.connect(required.url, tls_ca=str(pki.ca), login="bob", passcode="pw")
    assert "sent no client certificate" in server.wait_for_line("TLS handshake", start=start)
    start = len(server.lines)
    with pytest.raises(ConnectError, match="client certificate"):
        chute.connect(required.url, tls_ca=str(pki.ca), tls_cert=str(pki.stranger))
    assert "did not verify" in server.wait_for_line("TLS handshake", start=start)
    with chute.connect(required.url, tls_ca=str(pki.ca), tls_cert=str(pki.alice)) as conn:
        _acts_as(conn, "alice")  # the broker goes on serving


def test_plain_text_to_the_tls_port_is_told_and_logged(optional: Broker, pki: Pki) -> None:
    server = optional.server
    start = len(server.lines)
    with pytest.raises(ConnectError, match="if the port speaks TLS, use chutes://"):
        chute.connect(f"chute://127.0.0.1:{optional.tls}", login="bob", passcode="pw")
    line = server.wait_for_line("native-tls: TLS handshake", start=start)
    assert "plain text, not TLS" in line
    with chute.connect(optional.url, tls_ca=str(pki.ca), login="bob", passcode="pw") as conn:
        _acts_as(conn, "bob")


def test_tls_to_a_plain_port_is_told_and_logged(optional: Broker) -> None:
    server = optional.server
    start = len(server.lines)
    plain = f"chutes://127.0.0.1:{optional.native}"
    with pytest.raises(ConnectError, match="a plain port"):
        chute.connect(plain, tls_verify=False)
    line = server.wait_for_line("began a TLS handshake", start=start)
    assert line.split("WARNING chute.server: ")[1].startswith("native: 127.0.0.1:")
    with chute.connect(f"chute://127.0.0.1:{optional.native}", login="bob", passcode="pw") as c:
        _acts_as(c, "bob")


def test_a_tls_port_without_a_certificate_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="tls_cert"):
        start_server(tmp_path, "--tls-port", str(free_port()))
    with pytest.raises(RuntimeError, match="tls_cert"):
        start_server(tmp_path, "--stomp-tls-port", str(free_port()))


def test_required_client_certificates_without_a_ca_is_a_config_error(
    tmp_path: Path, pki: Pki
) -> None:
    with pytest.raises(RuntimeError, match=r"needs server\.tls_ca"):
        start_server(
            tmp_path,
            "--tls-port",
            str(free_port()),
            "--tls-cert",
            str(pki.broker),
            "--tls-client-certs",
            "required",
        )


# -- logins in URLs, and the command line ----------------------------------------------------


def test_a_url_carries_a_login_and_passcode(optional: Broker, pki: Pki) -> None:
    secret = urllib.parse.quote(CAROLS, safe="")
    with chute.connect(f"chute://carol:{secret}@127.0.0.1:{optional.native}") as conn:
        _acts_as(conn, "carol")
    tls_url = f"chutes://bob:pw@127.0.0.1:{optional.tls}"
    with chute.connect(tls_url, tls_ca=str(pki.ca)) as conn:
        _acts_as(conn, "bob")
    with pytest.raises(AuthenticationFailed):
        chute.connect(f"chute://bob:wrong@127.0.0.1:{optional.native}")
    wrong_url = f"chute://bob:wrong@127.0.0.1:{optional.native}"
    with chute.connect(wrong_url, login="alice", passcode="secret") as conn:
        _acts_as(conn, "alice")  # the arguments win over the URL

    async def run() -> None:
        async with chute.aio.connect(tls_url, tls_ca=str(pki.ca)) as conn, conn.session() as s:
            await s.send("queue:bob.aio", b"x")
            with pytest.raises(AccessDenied):
                await s.send("queue:alice.aio", b"x")

    asyncio.run(run())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_line_logs_in_from_the_url_or_with_a_certificate(
    optional: Broker, pki: Pki
) -> None:
    secret = urllib.parse.quote(CAROLS, safe="")
    url = f"chutes://carol:{secret}@127.0.0.1:{optional.tls}"
    sent = cli("send", "queue:carol.cli", "by url", "--url", url, "--tls-ca", str(pki.ca))
    assert sent.returncode == 0, sent.stderr
    got = cli("receive", "queue:carol.cli", "--url", url, "--tls-ca", str(pki.ca))
    assert got.returncode == 0, got.stderr
    assert "by url" in got.stdout

    wrong = f"chute://carol:wrong-{secret}@127.0.0.1:{optional.native}"
    refused = cli("send", "queue:carol.cli", "x", "--url", wrong)
    assert refused.returncode == 1
    assert refused.stderr == "chute: error: login or passcode rejected\n"

    with_cert = [
        "--url",
        optional.url,
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(pki.alice),
    ]
    assert cli("send", "queue:alice.cli", "by certificate", *with_cert).returncode == 0
    got = cli("receive", "queue:alice.cli", *with_cert)
    assert got.returncode == 0, got.stderr
    assert "by certificate" in got.stdout
    other = cli("send", "queue:bob.cli", "x", *with_cert)
    assert other.returncode == 1
    assert "user alice may not send queue:bob.cli" in other.stderr


def test_the_command_line_says_which_port_speaks_tls(optional: Broker, pki: Pki) -> None:
    plain_to_tls = cli("stat", "--url", f"chute://bob:pw@127.0.0.1:{optional.tls}")
    assert plain_to_tls.returncode == 1
    assert "if the port speaks TLS, use chutes://" in plain_to_tls.stderr
    tls_to_plain = cli(
        "stat", "--url", f"chutes://bob:pw@127.0.0.1:{optional.native}", "--tls-ca", str(pki.ca)
    )
    assert tls_to_plain.returncode == 1
    assert "a plain port? then use chute://" in tls_to_plain.stderr
    assert "Traceback" not in plain_to_tls.stderr + tls_to_plain.stderr


# -- STOMP over TLS --------------------------------------------------------------------------


class TlsStompClient(Client):
    """A :class:`Client` over stomp.py's TLS (``set_ssl``), with a client certificate or not."""

    def __init__(self, port: int, ca: Path, cert: Path | None = None, **connect: Any) -> None:
        conn = stomp.Connection12(
            [("127.0.0.1", port)], auto_decode=False, reconnect_attempts_max=1
        )
        conn.set_ssl(
            for_hosts=[("127.0.0.1", port)],
            ca_certs=str(ca),
            cert_file=str(cert) if cert else None,
            key_file=str(cert) if cert else None,
        )
        self._listen(conn, **connect)


def _stomp_acts_as(client: Client, user: str) -> None:
    """``client`` may use ``user``'s queues, which no other user's role grants. (Trying
    the other's would end the connection with an ERROR, which stomp.py 9 over TLS does
    not notice: it reads the close as "no data yet".)"""
    destination = f"/queue/{user}.check"
    client.conn.subscribe(destination, id="me", receipt="sub")
    client.receipt("sub")
    client.conn.send(destination, b"to " + user.encode())
    assert client.message().body == b"to " + user.encode()
    client.conn.unsubscribe("me")


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def test_stomp_over_tls_with_a_password_and_with_a_certificate(
    optional: Broker, pki: Pki, clients: list[Client]
) -> None:
    with_password = TlsStompClient(optional.stomp_tls, pki.ca, username="bob", passcode="pw")
    clients.append(with_password)
    _stomp_acts_as(with_password, "bob")
    with_cert = TlsStompClient(optional.stomp_tls, pki.ca, pki.alice)  # no login at all
    clients.append(with_cert)
    _stomp_acts_as(with_cert, "alice")


def test_stomp_refuses_a_login_naming_another_user_than_the_certificate(
    optional: Broker, pki: Pki
) -> None:
    with pytest.raises(ConnectFailedException):
        TlsStompClient(optional.stomp_tls, pki.ca, pki.alice, username="bob", passcode="pw")
    optional.server.wait_for_line("STOMP authentication failed for 'bob'")


def _refused_by_tls(port: int, ca: Path, cert: Path) -> bytes:
    """What a STOMP client with ``cert`` gets from ``port``: b"" if the broker closed
    the connection during or right after the handshake (stomp.py itself can wait
    forever for a CONNECTED after a TLS alert, so a plain TLS socket asks here)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")  # TLS 1.3: after the handshake
                return tls.recv(1024)
        except (ssl.SSLError, ConnectionError):
            return b""


def test_stomp_with_required_certificates(
    required: Broker, pki: Pki, clients: list[Client]
) -> None:
    server = required.server
    start = len(server.lines)
    assert _refused_by_tls(required.stomp_tls, pki.ca, pki.stranger) == b""
    assert "did not verify" in server.wait_for_line("stomp-tls: TLS handshake", start=start)
    client = TlsStompClient(required.stomp_tls, pki.ca, pki.alice)
    clients.append(client)
    _stomp_acts_as(client, "alice")


def test_stomp_plain_text_to_the_tls_port_and_tls_to_the_plain_port(
    optional: Broker, pki: Pki, clients: list[Client]
) -> None:
    server = optional.server
    start = len(server.lines)
    plain = stomp.Connection12([("127.0.0.1", optional.stomp_tls)], reconnect_attempts_max=1)
    with pytest.raises(ConnectFailedException):
        plain.connect(wait=True, username="bob", passcode="pw")
    line = server.wait_for_line("stomp-tls: TLS handshake", start=start)
    assert "plain text, not TLS" in line
    start = len(server.lines)
    with pytest.raises(ConnectFailedException):
        TlsStompClient(optional.stomp, pki.ca, username="bob", passcode="pw")
    assert "stomp: 127.0.0.1:" in server.wait_for_line("began a TLS handshake", start=start)
    for port, tls in ((optional.stomp, False), (optional.stomp_tls, True)):  # both still serve
        client = (
            TlsStompClient(port, pki.ca, username="bob", passcode="pw")
            if tls
            else Client(port, username="bob", passcode="pw")
        )
        clients.append(client)
        _stomp_acts_as(client, "bob")


# -- HTTPS and WSS ---------------------------------------------------------------------------


class WssClient(Client):
    """A :class:`Client` over stomp.py's ``WSStompConnection`` with TLS (wss://)."""

    def __init__(self, port: int, ca: Path, cert: Path | None = None, **connect: Any) -> None:
        conn = stomp.WSStompConnection(
            [("127.0.0.1", port)],
            ws_path="/stomp",
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            auto_decode=False,
            reconnect_attempts_max=1,
        )
        conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(ca))
        if cert is not None:
            # stomp.py 9 hands its set_ssl options to websocket-client as they are, and
            # websocket-client names a client certificate certfile/keyfile
            options = conn.transport.get_ssl(("127.0.0.1", port))
            options.update(certfile=str(cert), keyfile=str(cert))
        self._listen(conn, **connect)


def test_stomp_over_wss_with_a_password_and_with_a_certificate(
    optional: Broker, pki: Pki, clients: list[Client]
) -> None:
    with_password = WssClient(optional.http, pki.ca, username="bob", passcode="pw")
    clients.append(with_password)
    _stomp_acts_as(with_password, "bob")
    with_cert = WssClient(optional.http, pki.ca, pki.alice)
    clients.append(with_cert)
    _stomp_acts_as(with_cert, "alice")


def test_wss_refuses_a_login_naming_another_user_than_the_certificate(
    optional: Broker, pki: Pki
) -> None:
    ws = websocket.create_connection(
        f"wss://127.0.0.1:{optional.http}/stomp",
        timeout=TIMEOUT,
        subprotocols=["v12.stomp"],
        sslopt={"ca_certs": str(pki.ca), "certfile": str(pki.alice)},
    )
    try:
        ws.send("CONNECT\naccept-version:1.2\nlogin:bob\npasscode:pw\n\n\x00")
        answer = ws.recv()
        assert (answer.decode() if isinstance(answer, bytes) else answer).startswith("ERROR\n")
    finally:
        ws.close()


def test_https_serves_the_http_port(optional: Broker, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca))
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"https://127.0.0.1:{optional.http}/stomp", context=context)
    assert info.value.code == 426  # an HTTPS answer: this endpoint wants a WebSocket


def test_plain_http_to_the_https_port_is_logged_and_refused(optional: Broker, pki: Pki) -> None:
    server = optional.server
    start = len(server.lines)
    plain = http.client.HTTPConnection("127.0.0.1", optional.http, timeout=TIMEOUT)
    plain.request("GET", "/stomp")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        plain.getresponse()
    plain.close()
    line = server.wait_for_line("https: TLS handshake", start=start)
    assert "plain text, not TLS (HTTP_REQUEST)" in line


def test_https_to_a_plain_http_port_is_logged_and_refused(required: Broker, pki: Pki) -> None:
    server = required.server
    start = len(server.lines)
    context = ssl.create_default_context(cafile=str(pki.ca))
    with (
        socket.create_connection(("127.0.0.1", required.http), timeout=TIMEOUT) as sock,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        context.wrap_socket(sock, server_hostname="127.0.0.1")
    assert "http: 127.0.0.1:" in server.wait_for_line("began a TLS handshake", start=start)
    with pytest.raises(urllib.error.HTTPError) as info:  # and plain HTTP still works
        urllib.request.urlopen(f"http://127.0.0.1:{required.http}/stomp", timeout=TIMEOUT)
    assert info.value.code == 426
