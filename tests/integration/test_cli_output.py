"""What ``chute`` commands print and how they end, as a user runs them: ``--json`` is
JSON whatever the properties hold, a stream is read to its end, not to a count, and
``chute passwd`` without a terminal says what to do instead of failing with a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .conftest import ChuteServer
from .test_cli import chute


def strict_json(line: str) -> Any:
    """``line`` parsed as RFC 8259 JSON: bare ``NaN`` and ``Infinity`` are refused."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_json_carries_non_finite_floats_as_strings(server: ChuteServer) -> None:
    values = {"nan": "NaN", "up": "Infinity", "down": "-Infinity", "one": "1.5"}
    properties = [x for name, v in values.items() for x in ("--property", f"{name}={v}")]
    sent = chute(server, "send", "queue:floats", "x", *properties)
    assert sent.returncode == 0, sent.stderr
    got = chute(server, "receive", "queue:floats", "--json")
    assert got.returncode == 0, got.stderr
    message = strict_json(got.stdout.decode())
    assert message["properties"] == {
        "nan": "NaN",
        "up": "Infinity",
        "down": "-Infinity",
        "one": 1.5,
    }
    assert set(message["property_types"].values()) == {"double"}


def test_a_stream_is_read_to_its_end_with_status_0(server: ChuteServer) -> None:
    """The README's ``chute receive stream:audit --offset first --count 10`` on a
    stream holding one message: that message, status 0, and no wait for more (the
    timeout is far longer than the command is given)."""
    assert chute(server, "send", "stream:audit", "login alice").returncode == 0
    got = chute(
        server,
        "receive",
        "stream:audit",
        "--offset",
        "first",
        "--count",
        "10",
        "--timeout",
        "120",
        timeout=60,
    )
    assert (got.returncode, got.stdout, got.stderr) == (0, b"login alice\n", b"")
    assert chute(server, "send", "stream:audit", "login bob").returncode == 0
    again = chute(server, "receive", "stream:audit", "--offset", "first", "--count", "0")
    assert (again.returncode, again.stdout) == (0, b"login alice\nlogin bob\n")


def test_a_reader_of_what_comes_next_waits_as_on_a_queue(server: ChuteServer) -> None:
    assert chute(server, "send", "stream:ticks", "old").returncode == 0
    got = chute(server, "receive", "stream:ticks", "--count", "2", "--timeout", "0.3")
    assert (got.returncode, got.stdout) == (1, b"")  # nothing came after "old"
    assert b"received 0 of 2 messages" in got.stderr


def test_passwd_without_a_terminal_says_to_use_stdin() -> None:
    """No controlling terminal (a new session, as under cron or CI) and no ``--stdin``:
    one line saying what to do, status 2, no traceback, no prompt echoing a password."""
    made = subprocess.run(
        [sys.executable, "-m", "chute.cli", "passwd"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
        start_new_session=True,  # no controlling terminal
    )
    assert made.returncode == 2
    assert made.stdout == b""
    assert made.stderr.decode().splitlines() == [
        "chute: error: no terminal to ask for the password on: give it on standard input "
        "with --stdin (chute passwd --stdin < FILE)"
    ]
