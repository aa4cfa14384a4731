"""The admin API document's part about the cluster: ``GET /api/cluster`` and its schemas
(a destination's ``nodes`` is in :mod:`chute.admin.openapi`'s ``Destination``). Pure data."""

from __future__ import annotations

from typing import Any, Final

from chute.admin.openapi_base import Schema, _int, _object, _ok, _operation, _ref, _string

CLUSTER_SCHEMAS: Final[dict[str, Schema]] = {
    "NodeFigures": _object({"depth": _int(), "consumers": _int()}),
    "ClusterNode": _object(
        {
            "name": _string(),
            "address": _string(),
            "state": {"type": "string", "enum": ["up", "down"]},
            "links": {
                "type": "array",
                "items": _string(),
                "description": "The nodes it is linked to (as it said; [] when down).",
            },
        },
        {"reason": {**_string(), "description": "Why a node is down."}},
    ),
    "Cluster": _object(
        {
            "name": _string(),
            "node": {**_string(), "description": "The node answering."},
            "nodes": {"type": "array", "items": _ref("ClusterNode")},
        },
        {
            "role": {
                "type": "string",
                "enum": ["live", "backup"],
                "description": "This process's role in its node, when the node has backups "
                "(a backup answers this document too, with no `nodes`: it is linked to none).",
            },
            "epoch": {**_int(), "description": "The node's epoch: its live's term in etcd."},
            "backups": {
                "type": "array",
                "items": _ref("HaBackup"),
                "description": "On the live: each backup that connected and its state.",
            },
            "live": {**_string(), "description": "On a backup: where clients reach the live."},
            "in_sync": {"type": "boolean", "description": "On a backup: in sync with the live."},
            "position": {
                **_object({"segment": _int(), "offset": _int()}),
                "description": "On a backup: where its copy of the live's journal ends, as "
                "far as it synced since it started (segment 0: nothing yet).",
            },
        },
    ),
    "HaBackup": _object(
        {
            "address": {**_string(), "description": "The backup's address, as the live sees it."},
            "state": {"type": "string", "enum": ["in-sync", "catching-up", "down"]},
        }
    ),
}


def cluster_operations() -> dict[str, Any]:
    return {
        "/api/cluster": {
            "get": _operation(
                "The nodes of the cluster as this node sees them (404: not in a cluster).",
                {200: _ok("Cluster", "The cluster.")},
                (404,),
            )
        },
    }
