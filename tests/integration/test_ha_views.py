"""What a node with backups shows (docs/ha.md, "Seeing it"): ``chute stat``, the admin
API and ``/metrics`` of the live (its role, the epoch, each backup's state) and of a
backup (its role, its live, whether it is in sync, where its journal ends), and what
a backup refuses, naming the live. Real etcd, real ``chute serve`` processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from chute.client.blocking import connect
from chute.errors import NotLive
from chute.protocol import Error, PacketCodec, SessionOpen, StatFetch, StatPage
from chute.protocol.wire import encode_packet
from tests.integration.conftest import ChuteServer, free_port
from tests.integration.test_cluster_view import conforms
from tests.integration.test_ha import CLUSTER, DEADLINE, QUEUE, Pair, drain, kill, send
from tests.integration.test_ha import pair as pair  # noqa: PLC0414


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_backup_answers_health_and_metrics_and_refuses_the_rest(pair: Pair) -> None:
    live = pair.live("one")
    http = free_port()
    backup = pair.spawn("two", http_port=http)
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    base = f"http://127.0.0.1:{http}"
    assert _get(f"{base}/healthz") == (200, '{"status": "alive", "role": "backup"}')
    status, body = _get(f"{base}/readyz")
    assert status == 503
    assert json.loads(body) == {
        "status": "backup",
        "live": f"127.0.0.1:{live.port}",
        "in_sync": True,
    }
    status, body = _get(f"{base}/metrics")
    assert status == 200
    assert 'chute_ha_role{role="backup"} 1' in body
    assert "chute_ha_in_sync 1" in body
    status, body = _get(f"{base}/api/cluster")
    assert status == 200
    cluster = json.loads(body)
    assert (cluster["name"], cluster["node"], cluster["nodes"]) == (CLUSTER, "a", [])
    assert (cluster["role"], cluster["live"], cluster["in_sync"]) == (
        "backup",
        f"127.0.0.1:{live.port}",
        True,
    )
    assert cluster["epoch"] > 0
    assert cluster["position"]["segment"] > 0
    conforms(cluster, "Cluster")
    assert _get(f"{base}/api/destinations") == (200, '{"destinations": [], "next": null}')
    for path in ("/api/v1/destinations", "/api/overview", "/api/destinations/queue:orders"):
        status, body = _get(f"{base}{path}")
        assert status == 503, path
        assert f"its live is at 127.0.0.1:{live.port}" in body
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)  # the port is the broker's now
    assert _get(f"{base}/healthz") == (200, '{"status": "alive"}')


def test_stat_shows_the_role_the_epoch_and_the_backups(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    result = subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", "--json", "--url", live.url],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    cluster = json.loads(result.stdout)["cluster"]
    assert cluster["role"] == "live"
    assert isinstance(cluster["epoch"], int)
    assert cluster["epoch"] > 0
    assert [b["state"] for b in cluster["backups"]] == ["in-sync"]


def test_a_backup_restarted_is_listed_once_by_its_newest_link(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    kill(backup)
    line = live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
    backup = pair.spawn("two")
    live.wait_for_line("is in sync", start=live.lines.index(line), timeout=DEADLINE)
    backups = json.loads(_stat(live, "--json"))["cluster"]["backups"]
    assert [b["state"] for b in backups] == ["in-sync"]


def test_the_admin_api_and_metrics_of_the_live_show_its_role_and_backups(pair: Pair) -> None:
    http = free_port()
    live = pair.spawn("one", http_port=http)
    live.wait_for_line("chute listening", timeout=DEADLINE)
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    base = f"http://127.0.0.1:{http}"
    status, body = _get(f"{base}/api/cluster")
    assert status == 200
    cluster = json.loads(body)
    assert cluster["role"] == "live"
    assert cluster["epoch"] > 0
    [only] = cluster["backups"]
    assert only["state"] == "in-sync"
    conforms(cluster, "Cluster")
    status, body = _get(f"{base}/metrics")
    assert status == 200
    assert 'chute_ha_role{node="a",role="live"} 1.0' in body
    assert f'chute_ha_epoch{{node="a"}} {float(cluster["epoch"])}' in body
    assert f'chute_ha_backup_in_sync{{address="{only["address"]}",node="a"}} 1.0' in body
    kill(backup)
    live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
    status, body = _get(f"{base}/metrics")
    assert f'chute_ha_backup_in_sync{{address="{only["address"]}",node="a"}} 0.0' in body


def test_a_backup_refuses_clients_naming_the_live(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    refused = rf"backup .*its live is at 127\.0\.0\.1:{live.port}"
    with pytest.raises(NotLive, match=refused), connect(backup.url):
        pass
    # listed first, the backup gives way to the live: the connection works there
    both = f"chute://127.0.0.1:{backup.port},127.0.0.1:{live.port}?order=listed"
    with connect(both) as conn, conn.session() as session:
        session.send(QUEUE, "through the live")
    assert drain(live) == ["through the live"]


def _stat(server: ChuteServer, *flags: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", *flags, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    ).stdout


def test_chute_stat_on_a_backup_shows_its_role_its_live_and_its_position(pair: Pair) -> None:
    live = pair.live("one")
    send(live, ["before"])
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    stats = json.loads(_stat(backup, "--json"))
    assert stats["destinations"] == []
    cluster = stats["cluster"]
    assert (cluster["name"], cluster["node"], cluster["role"]) == (CLUSTER, "a", "backup")
    assert (cluster["live"], cluster["in_sync"]) == (f"127.0.0.1:{live.port}", True)
    live_epoch = json.loads(_stat(live, "--json"))["cluster"]["epoch"]
    assert cluster["epoch"] == live_epoch
    assert cluster["position"]["segment"] > 0
    assert cluster["position"]["offset"] > 0
    text = _stat(backup)
    assert f"this process is a backup (epoch {live_epoch}), in sync" in text
    assert f"its live at 127.0.0.1:{live.port}" in text
    # statistics first, then work: the work is refused, naming the live
    codec = PacketCodec()
    with socket.create_connection(("127.0.0.1", backup.port), timeout=DEADLINE) as sock:
        sock.sendall(encode_packet(StatFetch(), 1) + encode_packet(SessionOpen(1), 2))
        answers: list[object] = []
        while len(answers) < 2 and (data := sock.recv(65536)):
            codec.receive_data(data)
            answers += [packet for _, packet in codec.next_packets()]
    assert isinstance(answers[0], StatPage)
    assert isinstance(answers[1], Error)
    assert answers[1].code == "not-live"
    assert f"its live is at 127.0.0.1:{live.port}" in answers[1].reason
