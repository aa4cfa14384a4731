"""A broker starting with a new topic mount makes its subscription whole: a DropboxMQ
publisher listing ``.subscriptions/`` at any moment never meets the new directory
without its ``working/`` (one publisher was seen failing so, its file left in
``.incoming/working/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chute.dropbox.layout import init_subscription, init_topic
from tests.integration.conftest import start_server

# Runs `chute serve` with an audit hook that, just before every mkdir and rename the
# broker makes, looks at .subscriptions/ as a publisher would and reports any directory
# lacking one of the six dropbox directories.
WATCHER = """
import os, runpy, sys

SUBSCRIPTIONS = os.environ["WATCHED_SUBSCRIPTIONS"]
DIRS = ("working", "target", "processing", "processed", "expired", "error")
seen = set()

def audit(event, args):
    if event not in ("os.mkdir", "os.rename"):
        return
    try:
        names = os.listdir(SUBSCRIPTIONS)
    except FileNotFoundError:
        return
    for name in names:
        missing = [d for d in DIRS if not os.path.isdir(os.path.join(SUBSCRIPTIONS, name, d))]
        if missing and name not in seen:
            seen.add(name)
            print(f"HALF-MADE subscription {name}: no {missing}", file=sys.stderr, flush=True)

sys.addaudithook(audit)
sys.argv = ["chute", *sys.argv[4:]]  # after: <python> -m chute.cli
runpy.run_module("chute.cli", run_name="__main__", alter_sys=True)
"""


def test_a_new_topic_mount_makes_its_subscription_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mq = tmp_path / "mq"
    topic = init_topic(mq, "alerts")
    init_subscription(topic, "reader", "ls-user")  # a DropboxMQ subscriber beside
    watcher = tmp_path / "watch.py"
    watcher.write_text(WATCHER)
    config = tmp_path / "chute.toml"
    config.write_text(
        f"""
[[dropbox]]
root = "{mq}"
destinations = ["topic:alerts"]
poll_interval_ms = 50
"""
    )
    monkeypatch.setenv("WATCHED_SUBSCRIPTIONS", str(topic.subscriptions_dir))
    server = start_server(tmp_path, "--config", str(config), prefix=[sys.executable, str(watcher)])
    try:
        own = topic.subscription("chute-bridge", "chute-bridge")
        assert own.target.is_dir()  # made before the broker said it listens
    finally:
        server.stop()
    assert "HALF-MADE" not in server.output
    assert "Traceback" not in server.output
