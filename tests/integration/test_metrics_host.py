"""``/metrics`` of a broker without users answers only a loopback Host, as the admin API.

A page on a DNS name rebound to 127.0.0.1 makes the browser send its own name
as the Host: without the check it could read every destination's name and
depth from the figures.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import chute

from .conftest import free_port, start_server

WAIT = 10.0


def fetch(port: int, host: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as answer:  # noqa: S310 - http
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_refuse_a_rebound_host_without_users(tmp_path: Path) -> None:
    http = free_port()
    server = start_server(tmp_path, "--http-port", str(http))
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            session.send("queue:secret.payroll", "x")
        status, text = fetch(http, f"evil.example:{http}")
        assert status == 403, text
        assert "secret.payroll" not in text
        assert "loopback" in text
        for host in (f"127.0.0.1:{http}", f"localhost:{http}", f"[::1]:{http}"):
            status, text = fetch(http, host)
            assert status == 200, (host, text)
            assert 'address="queue:secret.payroll"' in text
    finally:
        assert server.stop() == 0, server.output
