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
