"""A client that reaches the broker only through an HTTP proxy that passes plain requests.

Debian's tinyproxy runs on loopback, configured to refuse ``CONNECT`` (only port
443 may be tunnelled) and, as it does for every request, dropping the hop-by-hop
``Upgrade`` header, so no WebSocket gets through. The clients know the broker as
``chute-broker.invalid``, a name that never resolves (RFC 2606): only the proxy
knows where it is (tinyproxy's ``upstream`` rule for ``.invalid`` sends those
requests to the broker's HTTP port), so a client can reach it through the proxy
and no other way (a direct connection fails to resolve the name). The clients
are told of the proxy as any HTTP client is (``HTTP_PROXY``): over ``http://``
the blocking and the asyncio client send, receive, ack and commit a transaction
(the broker logs the session's ``Via: ... tinyproxy``); over ``ws://`` they fail
with a clear error, and so do a raw ``CONNECT`` and a raw upgrade.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import chute
from chute.errors import ConnectError
from tests.tools import need_tool

from . import sync_aio
from .conftest import ChuteServer, free_port, start_server

TIMEOUT = 10.0
TINYPROXY = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
HIDDEN = "chute-broker.invalid"
"""The broker's name for the clients: only the proxy knows where it is."""


@dataclass
class Proxy:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    home = tmp_path_factory.mktemp("proxied")
    (home / "chute.toml").write_text("[server]\nhttp_poll_ms = 2000\n")
    server = start_server(
        home, "--config", str(home / "chute.toml"), "--http-port", str(free_port())
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, broker: ChuteServer) -> Iterator[Proxy]:
    home = tmp_path_factory.mktemp("tinyproxy")
    port = free_port()
    log = home / "tinyproxy.log"
    (home / "tinyproxy.conf").write_text(
        f'Port {port}\nListen 127.0.0.1\nTimeout 600\nLogLevel Info\nLogFile "{log}"\n'
        "MaxClients 100\nAllow 127.0.0.1\nConnectPort 443\n"
        f'upstream http 127.0.0.1:{_http_port(broker)} ".invalid"\n'  # only it knows the way
    )
    tinyproxy = need_tool(TINYPROXY, "the proxy tests put tinyproxy between client and broker")
    process = subprocess.Popen(
        [tinyproxy, "-d", "-c", str(home / "tinyproxy.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + TIMEOUT
    while True:  # until it accepts (it prints nothing we could wait for)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, "tinyproxy ended at start"
            assert time.monotonic() < deadline, "tinyproxy did not listen"
            time.sleep(0.05)
    yield Proxy(port, log)
    process.terminate()
    process.wait(10)


@pytest.fixture
def proxied(proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    """The environment names the proxy for every request, loopback included."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    return proxy


def _http_port(broker: ChuteServer) -> int:
    line = broker.wait_for_line("chute listening")
    return int(line.split("http 127.0.0.1:")[1].split()[0].rstrip(",)"))


def _exercise(conn: chute.Connection, queue: str) -> None:
    """Send, receive, ack, and a transaction committed."""
    with conn.session(ack="client") as session:
        session.send(queue, "one")
        consumer = session.consumer(queue)
        first = consumer.receive(timeout=TIMEOUT)
        assert first is not None
        assert first.text == "one"
        first.ack()
    with conn.session(transacted=True) as tx:
        tx.send(queue, "two")
        tx.send(queue, "three")
        tx.commit()
        consumer = tx.consumer(queue)
        got = [consumer.receive(timeout=TIMEOUT) for _ in range(2)]
        assert [m.text for m in got if m is not None] == ["two", "three"]
        tx.commit()
    assert conn.stat(queue)["destinations"][0]["depth"] == 0


def test_the_broker_s_name_means_nothing_without_the_proxy(broker: ChuteServer) -> None:
    with pytest.raises(ConnectError, match="cannot connect"):
        chute.connect(f"http://{HIDDEN}:{_http_port(broker)}/chute", timeout=TIMEOUT)


@pytest.mark.parametrize("client", ["blocking", "asyncio"])
def test_over_plain_requests_through_the_proxy_everything_works(
    broker: ChuteServer, proxied: Proxy, client: str
) -> None:
    url = f"http://{HIDDEN}:{_http_port(broker)}/chute"
    start = len(broker.lines)
    queue = f"queue:proxied.{client}"
    if client == "blocking":
        with chute.connect(url, timeout=TIMEOUT) as conn:
            _exercise(conn, queue)
    else:
        runner = sync_aio.LoopThread()
        try:
            conn = sync_aio.connect(runner, url, timeout=TIMEOUT)
            try:
                _exercise(conn, queue)
            finally:
                conn.close()
        finally:
            runner.close()
    opened = broker.wait_for_line("native over HTTP: session opened", start=start)
    assert "via" in opened
    assert "tinyproxy" in opened  # tinyproxy's Via header
    assert f"{HIDDEN}:{_http_port(broker)}/chute/" in proxied.log.read_text()


def test_a_websocket_cannot_pass_and_says_so(broker: ChuteServer, proxied: Proxy) -> None:
    url = f"ws://{HIDDEN}:{_http_port(broker)}/chute"
    with pytest.raises(ConnectError, match="WebSocket"):
        chute.connect(url, timeout=TIMEOUT)
    runner = sync_aio.LoopThread()
    try:
        with pytest.raises(ConnectError, match="cannot connect"):
            sync_aio.connect(runner, url, timeout=TIMEOUT)
    finally:
        runner.close()


def test_the_proxy_refuses_connect_and_upgrades(broker: ChuteServer, proxy: Proxy) -> None:
    port = _http_port(broker)
    tunnel = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=TIMEOUT)
    tunnel.request("CONNECT", f"127.0.0.1:{port}")
    assert tunnel.getresponse().status == 403
    upgrade = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=TIMEOUT)
    upgrade.request(
        "GET",
        f"http://127.0.0.1:{port}/chute",
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    answer = upgrade.getresponse()
    assert answer.status == 426  # the broker saw a plain GET: the upgrade was dropped
    assert b"POST /chute" in answer.read()
