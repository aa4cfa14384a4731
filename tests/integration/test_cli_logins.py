"""Where the ``chute`` command takes its login from: ``--login``/``--passcode``, else
the URL's (``chute://alice:secret@host``), else ``$CHUTE_LOGIN``/``$CHUTE_PASSCODE``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ChuteServer, start_server


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[ChuteServer]:
    config = tmp_path / "users.toml"
    config.write_text('[users.alice]\npassword = "s3cr@t"\nroles = ["admin"]\n')
    srv = start_server(tmp_path, "--config", str(config))
    yield srv
    srv.stop()


def chute(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"CHUTE_LOGIN", "CHUTE_PASSCODE"}}
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=30,
        check=False,
    )


def test_the_login_in_the_url_is_used(secured: ChuteServer) -> None:
    url = f"chute://alice:s3cr%40t@127.0.0.1:{secured.port}"
    sent = chute("send", "queue:logins", "from the url", "--url", url)
    assert sent.returncode == 0, sent.stderr
    wrong = chute("stat", "--url", f"chute://alice:nope@127.0.0.1:{secured.port}")
    assert wrong.returncode == 1
    assert "rejected" in wrong.stderr
    assert "nope" not in wrong.stderr  # an error never shows the passcode
    arguments_win = chute(
        "stat", "--url", f"chute://alice:nope@127.0.0.1:{secured.port}", "--passcode", "s3cr@t"
    )
    assert arguments_win.returncode == 0, arguments_win.stderr


def test_the_environment_is_the_last_resort(secured: ChuteServer) -> None:
    url = f"chute://127.0.0.1:{secured.port}"
    assert chute("stat", "--url", url).returncode == 1  # no login anywhere
    from_env = chute("stat", "--url", url, CHUTE_LOGIN="alice", CHUTE_PASSCODE="s3cr@t")
    assert from_env.returncode == 0, from_env.stderr
    url_wins = chute(
        "stat",
        "--url",
        f"chute://alice:s3cr%40t@127.0.0.1:{secured.port}",
        CHUTE_LOGIN="alice",
        CHUTE_PASSCODE="wrong",
    )
    assert url_wins.returncode == 0, url_wins.stderr
