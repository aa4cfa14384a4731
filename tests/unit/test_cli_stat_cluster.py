"""``chute stat`` from a node of a cluster: the nodes first, each destination's depth and
consumers per node under it; a broker on its own draws as before."""

from __future__ import annotations

from typing import Any

from chute.cli.stat import backup_text, render


def cluster_stats() -> dict[str, Any]:
    return {
        "cluster": {
            "name": "prod",
            "node": "a",
            "nodes": [
                {"name": "a", "address": "10.0.0.1:5445", "state": "up", "links": ["b"]},
                {"name": "b", "address": "10.0.0.2:5445", "state": "up", "links": ["a"]},
                {
                    "name": "c",
                    "address": "10.0.0.3:5445",
                    "state": "down",
                    "links": [],
                    "reason": "no answer within 2 s",
                },
            ],
        },
        "destinations": [
            {
                "address": "queue:orders",
                "kind": "queue",
                "depth": 1004,
                "ready": 1000,
                "inflight": 4,
                "consumers": 2,
                "enqueued": 10_310,
                "acked": 9106,
                "nodes": {
                    "a": {"depth": 1004, "consumers": 2},
                    "b": {"depth": 200, "consumers": 0},
                },
                "total": {"depth": 1204, "consumers": 2},
            },
            {
                "address": "queue:only-b",
                "kind": "queue",
                "depth": 0,
                "consumers": 0,
                "nodes": {"b": {"depth": 7, "consumers": 0}},
                "total": {"depth": 7, "consumers": 0},
            },
        ],
        "connections": 3,
    }


def test_the_nodes_come_first_then_each_destination_per_node() -> None:
    assert render(cluster_stats()) == (
        "cluster prod, seen from node a (*)\n"
        "NODE  ADDRESS        STATE                        LINKS\n"
        "a *   10.0.0.1:5445  up                           b\n"
        "b     10.0.0.2:5445  up                           a\n"
        "c     10.0.0.3:5445  down (no answer within 2 s)  -\n"
        "\n"
        "ADDRESS       DEPTH  READY  INFLIGHT  CONSUMERS  ENQUEUED  ACKED\n"
        "queue:orders  1,204  1,000         4          2    10,310  9,106\n"
        "  node a      1,004                           2\n"
        "  node b        200                           0\n"
        "queue:only-b      7                           0\n"
        "  node b          7                           0\n"
        "\n"
        "connections 3; destinations 2\n"
    )


def test_a_broker_on_its_own_shows_no_cluster() -> None:
    stats = cluster_stats()
    del stats["cluster"]
    for d in stats["destinations"]:
        del d["nodes"], d["total"]
    text = render(stats)
    assert "cluster" not in text
    assert "node" not in text


def test_a_backup_says_its_role_its_live_and_where_its_journal_ends() -> None:
    stats: dict[str, Any] = {
        "cluster": {
            "name": "shop",
            "node": "a",
            "role": "backup",
            "epoch": 42,
            "live": "10.0.0.1:5445",
            "in_sync": True,
            "position": {"segment": 7, "offset": 1048576},
        },
        "destinations": [],
    }
    assert backup_text(stats) == (
        "node a of cluster shop: this process is a backup (epoch 42), in sync with its "
        "live at 10.0.0.1:5445; its journal reaches segment 7, offset 1,048,576\n"
    )
    stats["cluster"].update(in_sync=False, live=None)
    assert "not in sync with its live at (not known yet)" in backup_text(stats)
