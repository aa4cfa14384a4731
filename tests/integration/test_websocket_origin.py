"""Browsers and the WebSocket endpoint: the ``Origin`` header decides, against a real broker.

A web page from anywhere can make the user's browser open a WebSocket to a
broker on their loopback, where no login is needed; the browser says which page
asked (``Origin``), so the broker refuses pages it does not know, with 403. The
broker here has no users (anonymous access on loopback) and allows one other
origin, ``https://app.example.com``. websocket-client stands in for a browser: it
sends the ``Origin`` it is given (or none with ``suppress_origin``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websocket

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT

ALLOWED = "https://app.example.com"
CONNECT = "CONNECT\naccept-version:1.2\n\n\x00"


@dataclass
class Web:
    server: ChuteServer
    http: int

    def open(self, **options: Any) -> websocket.WebSocket:
        return websocket.create_connection(
            f"ws://127.0.0.1:{self.http}/stomp",
            timeout=TIMEOUT,
            subprotocols=["v12.stomp"],
            **options,
        )


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    tmp = tmp_path_factory.mktemp("origin")
    config = tmp / "chute.toml"
    config.write_text(f'[server]\nallowed_origins = ["{ALLOWED}"]\n')
    http = free_port()
    server = start_server(tmp, "--config", str(config), "--http-port", str(http))
    yield Web(server, http)
    assert server.stop() == 0, server.output
    assert "Traceback" not in server.output, server.output


def _speaks_stomp(ws: websocket.WebSocket) -> None:
    try:
        ws.send(CONNECT)
        answer = ws.recv()
        assert (answer.decode() if isinstance(answer, bytes) else answer).startswith("CONNECTED\n")
    finally:
        ws.close()


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://app.example.com", "https://app.example.com:8443"]
)
def test_a_foreign_origin_is_refused_with_403_on_loopback_without_users(
    web: Web, origin: str
) -> None:
    start = len(web.server.lines)
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        web.open(origin=origin)
    assert info.value.status_code == 403
    line = web.server.wait_for_line("WebSocket from 127.0.0.1:", start=start)
    assert f"origin {origin!r} is not in server.allowed_origins" in line


def test_a_page_with_no_origin_of_its_own_is_refused(web: Web) -> None:
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        web.open(origin="null")  # a sandboxed frame, a file:// page
    assert info.value.status_code == 403


def test_a_configured_origin_may_open_the_websocket(web: Web) -> None:
    _speaks_stomp(web.open(origin=ALLOWED))
    _speaks_stomp(web.open(origin="HTTPS://App.Example.com:443"))  # the same origin, spelt so


def test_the_brokers_own_origin_may_open_the_websocket(web: Web) -> None:
    _speaks_stomp(web.open(origin=f"http://localhost:{web.http}"))
    _speaks_stomp(web.open(origin=f"http://127.0.0.1:{web.http}"))


def test_a_client_that_sends_no_origin_is_not_a_browser_and_may_connect(web: Web) -> None:
    _speaks_stomp(web.open(suppress_origin=True))


def test_a_bad_origin_in_the_configuration_is_an_error_that_says_what_to_write(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text('[server]\nallowed_origins = ["app.example.com"]\n')
    with pytest.raises(RuntimeError, match="is not an origin: write scheme://host"):
        start_server(tmp_path, "--config", str(config), "--http-port", str(free_port()))
