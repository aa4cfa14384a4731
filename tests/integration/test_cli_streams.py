"""``chute`` commands on a stream, as a user types them: send, receive from an offset
(again and again: nothing is consumed), and refusals that say what to do."""

from __future__ import annotations

import json

from .conftest import ChuteServer
from .test_cli import chute


def test_receive_reads_a_stream_from_an_offset_without_consuming(server: ChuteServer) -> None:
    for body in ("a", "b", "c"):
        sent = chute(server, "send", "stream:audit", body)
        assert sent.returncode == 0, sent.stderr
    for _ in range(2):  # a second read gets the same: reading removes nothing
        got = chute(
            server, "receive", "stream:audit", "--offset", "first", "--count", "3", "--json"
        )
        assert got.returncode == 0, got.stderr
        assert [json.loads(line)["body"] for line in got.stdout.splitlines()] == ["a", "b", "c"]
    last = chute(server, "receive", "stream:audit", "--offset", "last", "--json")
    assert [json.loads(line)["body"] for line in last.stdout.splitlines()] == ["c"]
    middle = chute(server, "receive", "stream:audit", "--offset", "2", "--count", "2", "--json")
    assert [json.loads(line)["body"] for line in middle.stdout.splitlines()] == ["b", "c"]


def test_an_offset_on_a_queue_or_a_bad_offset_is_refused_with_the_forms(
    server: ChuteServer,
) -> None:
    assert chute(server, "send", "queue:jobs", "x").returncode == 0
    refused = chute(server, "receive", "queue:jobs", "--offset", "first")
    assert refused.returncode != 0
    assert b"an offset applies to streams only" in refused.stderr
    bad = chute(server, "receive", "stream:audit", "--offset", "yesterday")
    assert bad.returncode != 0
    assert b"first, last, next" in bad.stderr
