"""The ``chute`` command as a user types it, against a ``chute serve`` subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chute import __version__

from .conftest import ChuteServer, free_port, start_server


def chute(
    server: ChuteServer | None, *args: str, stdin: bytes | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[bytes]:
    url = ["--url", server.url] if server is not None else []
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args, *url],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def test_send_receive_browse_stat(server: ChuteServer) -> None:
    sent = chute(
        server,
        "send",
        "queue:orders",
        '{"id": 1}',
        "--priority",
        "7",
        "--ttl",
        "60000",
        "--property",
        "region=eu",
        "--property",
        "count=3",
    )
    assert sent.returncode == 0, sent.stderr
    assert chute(server, "send", "queue:orders", "second").returncode == 0

    browsed = chute(server, "browse", "queue:orders", "--json")
    assert browsed.returncode == 0, browsed.stderr
    rows = [json.loads(line) for line in browsed.stdout.splitlines()]
    assert [r["body"] for r in rows] == ['{"id": 1}', "second"]
    first = rows[0]
    assert first["priority"] == 7
    assert first["properties"] == {"region": "eu", "count": 3}
    assert first["property_types"] == {"region": "string", "count": "long"}
    assert first["expiration"] == first["timestamp"] + 60000

    received = chute(server, "receive", "queue:orders", "--count", "1", "--json")
    assert received.returncode == 0, received.stderr
    message = json.loads(received.stdout)
    assert message["body"] == '{"id": 1}'
    assert message["delivery_count"] == 1
    assert message["redelivered"] is False

    stat = chute(server, "stat", "--json")
    assert stat.returncode == 0, stat.stderr
    row = next(d for d in json.loads(stat.stdout)["destinations"] if d["address"] == "queue:orders")
    assert (row["enqueued"], row["acked"], row["depth"]) == (2, 1, 1)
    table = chute(server, "stat")
    assert b"queue:orders" in table.stdout
    assert b"DEPTH" in table.stdout


def test_send_reads_stdin_and_binary_bodies_survive(server: ChuteServer) -> None:
    body = bytes(range(256))
    assert chute(server, "send", "queue:bin", stdin=body).returncode == 0
    received = chute(server, "receive", "queue:bin", "--json")
    message = json.loads(received.stdout)
    import base64

    assert base64.b64decode(message["body_base64"]) == body


def test_selector_and_timeout(server: ChuteServer) -> None:
    chute(server, "send", "queue:sel", "us", "-p", "region=us")
    chute(server, "send", "queue:sel", "eu", "-p", "region=eu")
    got = chute(server, "receive", "queue:sel", "--selector", "region = 'eu'")
    assert got.stdout == b"eu\n"
    none = chute(server, "receive", "queue:sel", "--selector", "region = 'eu'", "--timeout", "0.3")
    assert none.returncode == 1
    assert b"received 0 of 1" in none.stderr


def test_clear_errors_without_tracebacks(server: ChuteServer) -> None:
    bad_name = chute(server, "send", "queue:a/b", "x")
    assert bad_name.returncode == 1
    assert b"invalid destination name" in bad_name.stderr
    assert b"Traceback" not in bad_name.stderr
    bad_selector = chute(server, "receive", "queue:x", "--selector", "a = = 1")
    assert bad_selector.returncode == 1
    assert b"Traceback" not in bad_selector.stderr
    bad_priority = chute(server, "send", "queue:x", "x", "--priority", "12")
    assert bad_priority.returncode != 0
    assert b"priority" in bad_priority.stderr


def test_no_broker_is_a_clear_error() -> None:
    from .conftest import free_port

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chute.cli",
            "send",
            "queue:x",
            "hi",
            "--url",
            f"chute://127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    assert b"chute: error" in result.stderr


def test_bad_config_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[destinations."queue:x"]\noverflow = "explode"\n')
    result = subprocess.run(
        [sys.executable, "-m", "chute.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"overflow" in result.stderr
    assert b"reject | dead-letter | drop-oldest | block" in result.stderr


def test_public_bind_needs_users(tmp_path: Path) -> None:
    public = "0.0.0.0"  # noqa: S104 - the refusal to bind it is the point
    result = subprocess.run(
        [sys.executable, "-m", "chute.cli", "serve", "--host", public, "--port", "0"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"[users]" in result.stderr


def test_authentication(tmp_path: Path) -> None:
    config = tmp_path / "auth.toml"
    config.write_text('[users.alice]\npassword = "secret"\nroles = ["admin"]\n')
    srv = start_server(tmp_path, "--config", str(config))
    try:
        denied = chute(srv, "send", "queue:x", "hi")
        assert denied.returncode == 1
        assert b"rejected" in denied.stderr
        ok = chute(srv, "send", "queue:x", "hi", "--login", "alice", "--passcode", "secret")
        assert ok.returncode == 0, ok.stderr
    finally:
        srv.stop()


def test_passwd_prints_a_hash_that_logs_in_and_a_user_without_a_role_may_do_nothing(
    tmp_path: Path,
) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "chute.cli", "passwd", "--stdin"],
        input=b"s3cret\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    hashed = made.stdout.decode().strip()
    assert hashed.startswith("$argon2id$")
    assert b"s3cret" not in made.stdout
    config = tmp_path / "auth.toml"
    config.write_text(
        f'[users.alice]\npassword = "{hashed}"\nroles = ["admin"]\n'
        '[users.idle]\npassword = "pw"\n'  # the short form of old: no roles
    )
    srv = start_server(tmp_path, "--config", str(config))
    try:
        assert any("idle have no roles" in line for line in srv.lines)
        ok = chute(srv, "send", "queue:x", "hi", "--login", "alice", "--passcode", "s3cret")
        assert ok.returncode == 0, ok.stderr
        wrong = chute(srv, "send", "queue:x", "hi", "--login", "alice", "--passcode", "secret")
        assert b"rejected" in wrong.stderr
        idle = chute(srv, "send", "queue:x", "hi", "--login", "idle", "--passcode", "pw")
        assert idle.returncode == 1
        assert b"may not send queue:x" in idle.stderr
    finally:
        srv.stop()


def test_looking_creates_nothing_and_a_mistyped_kind_is_refused(server: ChuteServer) -> None:
    looked = chute(server, "browse", "queue:never-made")
    assert looked.returncode == 0, looked.stderr
    assert looked.stdout == b""  # it holds nothing ...
    typo = chute(server, "send", "qeueu:orders", "hi")
    assert typo.returncode == 1
    assert b"looks like a mistyped queue" in typo.stderr
    stat = chute(server, "stat", "--json")
    addresses = {d["address"] for d in json.loads(stat.stdout)["destinations"]}
    assert "queue:never-made" not in addresses  # ... and looking did not make it
    assert not any("qeueu" in a for a in addresses)


def test_values_out_of_range_are_usage_errors_naming_the_argument() -> None:
    cases = [
        (["send", "queue:q", "x", "--ttl", "-5"], "--ttl: must be 0 or more, not -5"),
        (["send", "queue:q", "x", "--priority", "12"], "--priority: must be 0..9, not 12"),
        (["browse", "queue:q", "--limit", "-3"], "--limit: must be 0 or more, not -3"),
        (["receive", "queue:q", "--count", "-1"], "--count: must be 0 or more, not -1"),
        (["receive", "queue:q", "--timeout", "-1"], "--timeout: must be 0 or more seconds"),
        (["receive", "queue:q", "--count", "many"], "--count: 'many' is not a whole number"),
        (["dropbox", "send", "--root", "/nonexistent", "q", "x", "--ttl", "-5"], "--ttl"),
    ]
    for args, said in cases:
        result = chute(None, *args)
        err = result.stderr.decode()
        assert result.returncode == 2, (args, err)
        assert said in err, (args, err)
        assert "Traceback" not in err


def test_version_and_python_dash_m_chute() -> None:
    by_command = chute(None, "--version")
    assert by_command.returncode == 0
    assert by_command.stdout.decode().strip() == f"chute {__version__}"
    by_module = subprocess.run(
        [sys.executable, "-m", "chute", "--version"], capture_output=True, check=False
    )
    assert (by_module.returncode, by_module.stdout) == (0, by_command.stdout)


def test_the_native_client_pointed_at_the_stomp_or_http_port_says_so(tmp_path: Path) -> None:
    stomp_port, http_port = free_port(), free_port()
    server = start_server(tmp_path, "--stomp-port", str(stomp_port), "--http-port", str(http_port))
    try:
        for port, answer in ((stomp_port, "'ERROR'"), (http_port, "'HTTP/1.")):
            result = chute(None, "stat", "--url", f"chute://127.0.0.1:{port}")
            err = result.stderr.decode()
            assert result.returncode == 1, err
            assert "does not speak chute's native protocol" in err
            assert f"it answered {answer}" in err
            assert "STOMP or HTTP port" in err
            assert "chutes://" not in err  # not a TLS hint: the port answered
    finally:
        server.stop()


def test_a_body_given_as_an_argument_is_text_as_with_chute_dropbox_send(
    server: ChuteServer,
) -> None:
    import chute as client  # the Python client, to see the body's kind

    assert chute(server, "send", "queue:kinds", "héllo").returncode == 0
    assert chute(server, "send", "queue:kinds", stdin=b"\x00raw").returncode == 0
    with client.connect(server.url) as conn, conn.session() as session:
        consumer = session.consumer("queue:kinds")
        text, raw = consumer.receive(timeout=10), consumer.receive(timeout=10)
    assert text is not None
    assert raw is not None
    assert (text.kind, text.text) == (client.BodyKind.TEXT, "héllo")
    assert (raw.kind, raw.body) == (client.BodyKind.BYTES, b"\x00raw")


def test_a_config_file_in_sections_is_served_as_written(tmp_path: Path) -> None:
    config = tmp_path / "sections.toml"
    config.write_text(
        '[server.storage]\nstore = "memory"\n'
        '[server.limits]\nmax_packet_size = "2KiB"\nmax_login_frame_size = "1KiB"\n'
    )
    srv = start_server(tmp_path, "--config", str(config))
    try:
        assert "(messages in memory)" in srv.output
        small = chute(srv, "send", "queue:x", "x" * 1000)
        assert small.returncode == 0, small.stderr
        big = chute(srv, "send", "queue:x", "x" * 4000)
        assert big.returncode == 1
        assert b"Traceback" not in big.stderr
    finally:
        srv.stop()


def test_a_key_given_flat_and_in_its_section_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "twice.toml"
    config.write_text('[server]\nmax_packet_size = "1MiB"\nlimits.max_packet_size = "2MiB"\n')
    result = subprocess.run(
        [sys.executable, "-m", "chute.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr
    assert (
        b"server.limits.max_packet_size: already given as server.max_packet_size" in result.stderr
    )
