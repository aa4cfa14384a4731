"""A browser's WebSocket over TLS: headless Chromium (Debian's, driven by Playwright)
opens ``wss://`` to a real ``chute serve`` from a page of another origin, as a
stomp.js application does.

Chromium cancels a WebSocket whose TLS handshake asks for a client certificate
(only a page load may ask the user for one), even when the broker would take
none (``tls_client_certs = "optional"``). So the HTTP port gets its own mode,
``http_tls_client_certs = "none"``, while the native and STOMP ports go on taking
certificates. Playwright never downloads a browser here: it launches
``/usr/bin/chromium`` (``make install-test`` installs it).
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp
import trustme
from playwright.sync_api import sync_playwright

from tests.tools import need_tool

from .conftest import ChuteServer, free_port, start_server
from .test_console import CHROMIUM, CHROMIUM_ARGS
from .test_stomp import TIMEOUT

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(180)]

WAIT_MS = 15_000
OPEN_STOMP = """([url, login, passcode, wait]) => new Promise((resolve) => {
    const ws = new WebSocket(url, ["v12.stomp"]);
    ws.onopen = () => ws.send(
        `CONNECT\\naccept-version:1.2\\nhost:/\\nlogin:${login}\\npasscode:${passcode}\\n\\n\\0`);
    ws.onmessage = (m) => resolve(String(m.data).split("\\n")[0]);
    ws.onclose = (e) => resolve(`closed ${e.code}`);
    setTimeout(() => resolve("no answer"), wait);
})"""
"""Opens a STOMP WebSocket and logs in: the first line of the answer, or how it ended."""


@pytest.fixture
def page_origin(tmp_path: Path) -> Iterator[str]:
    """A page of another origin than the broker's (on loopback, as the broker is)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>app</title><p>app</p>\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _broker(tmp: Path, origin: str, http_client_certs: str) -> tuple[ChuteServer, int, int, Path]:
    """A broker asking TLS clients for certificates (optional): (server, https port,
    STOMP TLS port, the PKI's directory)."""
    ca = trustme.CA()
    pki = tmp / "pki"
    pki.mkdir()
    ca.cert_pem.write_to_path(str(pki / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pki / "broker.pem"))
    ca.issue_cert("alice", common_name="alice").private_key_and_cert_chain_pem.write_to_path(
        str(pki / "alice.pem")
    )
    config = tmp / "chute.toml"
    config.write_text(
        f'[server]\ntls_ca = "{pki / "ca.pem"}"\ntls_client_certs = "optional"\n'
        f'http_tls_client_certs = "{http_client_certs}"\nallowed_origins = ["{origin}"]\n'
        '[users.bob]\npassword = "pw"\nroles = ["all"]\n[users.alice]\nroles = ["all"]\n'
        '[roles.all]\nsend = ["*"]\nconsume = ["*"]\ncreate = ["*"]\n'
    )
    https, stomp_tls = free_port(), free_port()
    server = start_server(
        tmp,
        *("--config", str(config), "--tls-cert", str(pki / "broker.pem")),
        *("--http-port", str(https), "--http-tls", "--stomp-tls-port", str(stomp_tls)),
    )
    return server, https, stomp_tls, pki


def _browser_logs_in(tmp: Path, origin: str, https: int) -> str:
    """What a page from ``origin`` gets when it logs in over ``wss://`` as bob."""
    need_tool(CHROMIUM, "the browser TLS tests drive Chromium")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            # the test CA: trust is not what is tested here
            args=[*CHROMIUM_ARGS, "--ignore-certificate-errors"],
            ignore_https_errors=True,
        )
        try:
            page = context.new_page()
            page.goto(f"{origin}/index.html", timeout=WAIT_MS)
            url = f"wss://127.0.0.1:{https}/stomp"
            return str(page.evaluate(OPEN_STOMP, [url, "bob", "pw", WAIT_MS]))
        finally:
            context.close()


def test_a_browser_wss_is_cancelled_when_the_http_port_asks_for_certificates(
    tmp_path: Path, page_origin: str
) -> None:
    server, https, _, _ = _broker(tmp_path, page_origin, "same")  # optional, as the others
    try:
        server.wait_for_line("https asks clients for a certificate (optional)")
        answer = _browser_logs_in(tmp_path, page_origin, https)
        assert answer.startswith("closed"), answer
        line = server.wait_for_line("the client closed the connection during the handshake")
        assert "https: TLS handshake with 127.0.0.1:" in line
        assert "does it trust" not in server.output  # the browser trusts the certificate
    finally:
        assert server.stop() == 0, server.output


def test_with_http_tls_client_certs_none_browsers_connect_and_the_tls_ports_take_certs(
    tmp_path: Path, page_origin: str
) -> None:
    server, https, stomp_tls, pki = _broker(tmp_path, page_origin, "none")
    try:
        assert _browser_logs_in(tmp_path, page_origin, https) == "CONNECTED"
        server.wait_for_line("STOMP/WebSocket client")
        assert "https: TLS handshake" not in server.output
        assert "https asks clients for a certificate" not in server.output
        # STOMP over TLS still logs a client in by its certificate
        conn = stomp.Connection12([("127.0.0.1", stomp_tls)], reconnect_attempts_max=1)
        conn.set_ssl(
            for_hosts=[("127.0.0.1", stomp_tls)],
            ca_certs=str(pki / "ca.pem"),
            cert_file=str(pki / "alice.pem"),
        )
        conn.connect(wait=True)
        try:
            assert "(user=alice" in server.wait_for_line("STOMP client", timeout=TIMEOUT)
        finally:
            conn.disconnect()
    finally:
        assert server.stop() == 0, server.output
