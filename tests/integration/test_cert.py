"""``chute cert``, end to end: its files and the configuration it prints run a TLS broker."""

from __future__ import annotations

import re
import shlex
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import stomp

from .conftest import free_port, start_server
from .test_stomp import TIMEOUT


def chute(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_chute_cert_output_runs_a_broker_the_cli_and_stomp_py_reach(tmp_path: Path) -> None:
    made = chute("cert", str(tmp_path / "tls"), "--client", "alice")
    assert made.returncode == 0, made.stderr
    files = tmp_path / "tls"
    for name in ("ca.pem", "broker.pem", "broker-key.pem", "client-alice.pem"):
        assert f"wrote {files / name}" in made.stdout

    # the [server] lines it printed, on free ports
    printed = made.stdout.split("[server]\n", 1)[1].split("\n\n", 1)[0]
    tls_port, stomp_tls_port, http_port = free_port(), free_port(), free_port()
    printed = re.sub(r"^tls_port = \d+", f"tls_port = {tls_port}", printed, flags=re.M)
    printed = re.sub(
        r"^stomp_tls_port = \d+", f"stomp_tls_port = {stomp_tls_port}", printed, flags=re.M
    )
    assert 'tls_client_certs = "optional"' in printed
    config = tmp_path / "chute.toml"
    config.write_text(f'[server]\n{printed}\n[users.alice]\nroles = ["admin"]\n')
    server = start_server(tmp_path, "--config", str(config), "--http-port", str(http_port))

    # the client commands it printed, on the free port
    for command in ("send", "receive"):
        [line] = [x for x in made.stdout.splitlines() if x.startswith(f"chute {command} ")]
        words = shlex.split(line)[1:]
        words[words.index("--url") + 1] = f"chutes://127.0.0.1:{tls_port}"
        done = chute(*words)
        assert done.returncode == 0, done.stderr
    assert "over TLS" in done.stdout

    url = ["--url", f"chutes://127.0.0.1:{tls_port}", "--tls-ca", str(files / "ca.pem")]
    anonymous = chute("send", "queue:hello", "x", *url)  # alice's certificate is the way in
    assert anonymous.returncode == 1
    assert "login or passcode rejected" in anonymous.stderr

    conn = stomp.Connection12([("127.0.0.1", stomp_tls_port)], reconnect_attempts_max=1)
    conn.set_ssl(
        for_hosts=[("127.0.0.1", stomp_tls_port)],
        ca_certs=str(files / "ca.pem"),
        cert_file=str(files / "client-alice.pem"),
        key_file=str(files / "client-alice-key.pem"),
    )
    conn.connect(wait=True)
    assert conn.is_connected()
    conn.disconnect()

    https = ssl.create_default_context(cafile=str(files / "ca.pem"))
    with pytest.raises(urllib.error.HTTPError) as info:  # for the name localhost too
        urllib.request.urlopen(f"https://localhost:{http_port}/stomp", context=https)
    assert info.value.code == 426
    assert server.stop(timeout=TIMEOUT) == 0
    assert "Traceback" not in server.output
