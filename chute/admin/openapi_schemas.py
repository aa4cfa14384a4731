"""The admin API's OpenAPI document: the objects the broker reports (destinations and
their counters, streams, connections, consumers, subscriptions, cursors, prepared
transactions) and their lists. Pure data (:mod:`chute.admin.openapi` assembles the
document).
"""

from __future__ import annotations

from typing import Final

from chute.admin.openapi_base import (
    Schema,
    _int,
    _object,
    _ref,
    _string,
)
from chute.admin.rates import COUNTERS

_COUNTERS: Final = {
    "depth": _int(),
    "inflight": _int(),
    "consumers": _int(),
    "enqueued": _int(),
    "acked": _int(),
    "expired": _int(),
    "dead_lettered": _int(),
}
_MORE_COUNTERS: Final = {
    "ready": _int(),
    "bytes": _int(),
    "delivered": _int(),
    "redelivered": _int(),
}

_STREAM_FIELDS: Final = {  # a stream's (its `depth`: the messages it keeps)
    "first": {**_int(), "description": "A stream's oldest offset kept."},
    "head": {**_int(), "description": "A stream's next offset: the one its next message gets."},
    "removed": {
        **_int(),
        "description": "Messages a stream's retention, compaction or a purge removed.",
    },
    "readers": {"type": "array", "items": _ref("StreamReader")},
    "home": {
        **_string(),
        "description": (
            "From a node of a cluster: the node that is this stream partition's home (holds "
            "its log and gives its offsets), when the answering node knows it."
        ),
    },
}

SCHEMAS: Final[dict[str, Schema]] = {
    "Error": {
        **_object({"error": _string(), "message": _string()}),
        "description": "`error`: a stable code; `message`: what went wrong and what to do.",
    },
    "Rates": _object({name: {"type": "number", "minimum": 0} for name in COUNTERS}),
    "SubscriptionStats": _object(
        {"name": _string(), "kind": _string(), "selector": _string(nullable=True), **_COUNTERS},
        _MORE_COUNTERS,
    ),
    "StreamReader": {
        **_object(
            {
                "position": {**_int(), "description": "The next offset it reads."},
                "consumers": _int(),
            }
        ),
        "description": "A stream consumer's reader; `head` minus `position`: how far behind.",
    },
    "Destination": _object(
        {
            "address": _string(),
            "kind": {"type": "string", "enum": ["queue", "topic", "stream"]},
            **_COUNTERS,
            "rates": _ref("Rates"),
        },
        {
            **_MORE_COUNTERS,
            "subscriptions": {"type": "array", "items": _ref("SubscriptionStats")},
            **_STREAM_FIELDS,
            "nodes": {
                "type": "object",
                "additionalProperties": _ref("NodeFigures"),
                "description": (
                    "From a node of a cluster: the depth and consumers on each node that "
                    "answered and holds it (every other field is the answering node's)."
                ),
            },
            "total": {
                **_ref("NodeFigures"),
                "description": "From a node of a cluster: `nodes` summed, the cluster's.",
            },
        },
    ),
    "DestinationDetail": {
        "allOf": [
            _ref("Destination"),
            _object(
                {"consumers_detail": {"type": "array", "items": _ref("Consumer")}},
                {"paged": _int()},
            ),
        ]
    },
    "DestinationPage": _object(
        {
            "destinations": {"type": "array", "items": _ref("Destination")},
            "next": {
                **_string(nullable=True),
                "description": "Pass as `after` for the next page; null: this was the last.",
            },
        }
    ),
    "Created": _object({"address": _string(), "created": {"type": "boolean"}}),
    "Deleted": _object({"deleted": _int()}),
    "Purged": _object({"purged": _int()}),
    "MoveJob": _object(
        {
            "id": _string(),
            "kind": {"type": "string", "enum": ["move", "retry"]},
            "from": {**_string(), "description": "The source queue."},
            "to": {
                "oneOf": [
                    _string(),
                    {"type": "object", "additionalProperties": _int()},
                ],
                "description": "A move's target; a retry's count of messages sent back to "
                "each origin.",
            },
            "selector": _string(nullable=True),
            "limit": _int(),
            "state": {
                "type": "string",
                "enum": ["running", "done", "cancelled", "failed"],
                "description": "`done` once what it moved is durable.",
            },
            "moved": {**_int(), "description": "Messages moved (a retry: sent back) so far."},
            "remaining": {
                **_int(),
                "nullable": True,
                "description": "Messages waiting in the source now, in memory or paged "
                "(null: it is gone).",
            },
            "in_flight": {
                **_int(),
                "nullable": True,
                "description": "Messages of the source in flight to consumers: a move leaves them.",
            },
            "started": {"type": "number", "description": "When it began (Unix seconds)."},
            "ended": {"type": "number", "nullable": True},
            "rate": {"type": "number", "description": "Messages moved per second."},
            "error": {
                "type": "object",
                "nullable": True,
                "required": ["error", "message"],
                "properties": {"error": _string(), "message": _string()},
                "description": "Why it failed or was cancelled.",
            },
        },
        {
            "left": {
                **_int(),
                "description": "A retry's dead letters left in place: where they came from "
                "is unknown.",
            }
        },
    ),
    "MoveJobList": _object({"moves": {"type": "array", "items": _ref("MoveJob")}}),
    "PropertyValue": {
        "oneOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, _string()],
        "description": "A non-finite float is given as the string NaN, Infinity or -Infinity.",
    },
    "Message": _object(
        {
            "seq": {**_int(), "description": "Its sequence number; in a stream, its offset."},
            "id": _string(),
            "priority": {"type": "integer", "minimum": 0, "maximum": 9},
            "timestamp": _int(),
            "expiration": _int(),
            "persistent": {"type": "boolean"},
            "redelivered": {"type": "boolean"},
            "delivery_count": _int(),
            "correlation_id": _string(nullable=True),
            "reply_to": _string(nullable=True),
            "type": _string(nullable=True),
            "kind": {
                "type": "string",
                "enum": ["message", "bytes", "text", "map", "stream", "object"],
            },
            "properties": {"type": "object", "additionalProperties": _ref("PropertyValue")},
            "property_types": {"type": "object", "additionalProperties": _string()},
            "body": _string(),
            "body_encoding": {"type": "string", "enum": ["utf-8", "base64"]},
            "size": {**_int(), "description": "The whole body's size in bytes."},
            "truncated": {
                "type": "boolean",
                "description": "`body` holds only the first 64 KiB of the body.",
            },
        }
    ),
    "MessagePage": _object(
        {
            "messages": {"type": "array", "items": _ref("Message")},
            "after": {**_int(), "description": "Pass as `after` for the next page."},
            "before": {**_int(), "description": "Pass as `before` for the next page."},
            "done": {"type": "boolean", "description": "The walk is over: no next page."},
        }
    ),
    "Connection": _object(
        {
            "id": _string(),
            "protocol": _string(),
            "user": _string(nullable=True),
            "peer": _string(),
            "client_id": _string(nullable=True),
            "connected_at": {**_int(), "description": "Milliseconds since the epoch."},
            "sessions": _int(),
            "consumers": _int(),
            "unacked": _int(),
        }
    ),
    "Consumer": _object(
        {
            "connection": {
                **_string(nullable=True),
                "description": "null: a part of the broker (a callback's forwarder, a cursor).",
            },
            "id": {"type": "integer"},
            "address": _string(),
            "subscription": _string(nullable=True),
            "ack_mode": _string(),
            "selector": _string(nullable=True),
            "prefetch": {"type": "integer"},
            "credit": {"type": "integer"},
            "exclusive": {"type": "boolean"},
            "unacked": _int(),
            "delivered": _int(),
        }
    ),
    "Subscription": _object(
        {
            "topic": _string(),
            "name": _string(),
            "client_id": _string(nullable=True),
            "kind": _string(),
            "selector": _string(nullable=True),
            "forward_to": _string(nullable=True),
            "owner": _string(nullable=True),
            "depth": _int(),
            "ready": _int(),
            "inflight": _int(),
            "consumers": _int(),
        }
    ),
    "Cursor": _object(
        {
            "address": _string(),
            "name": _string(),
            "position": _int(),
            "selector": _string(nullable=True),
            "lease": _object(
                {
                    "held": {"type": "boolean"},
                    "lease_ms": _int(),
                    "openers": {"type": "array", "items": _string()},
                    "expires_at": {**_int(), "nullable": True},
                }
            ),
        }
    ),
    "Overview": _object(
        {
            "version": _string(),
            "uptime_s": {"type": "number"},
            "ready": {"type": "boolean"},
            "connections": _int(),
            "memory": {"type": "object"},
            "disk": _object(
                {
                    "free_bytes": {**_int(), "nullable": True},
                    "free_limit": {
                        **_int(),
                        "description": "disk_free_limit: under it producers wait (0: off).",
                    },
                    "low": {
                        **_string(nullable=True),
                        "description": "Why producers wait for the disk; null: they do not.",
                    },
                }
            ),
            "destination_count": _int(),
            "prepared": _int(),
            "blocked_connections": {
                **_int(),
                "description": "Connections not read now because their producer waits: for "
                "memory or disk, for room in a destination (overflow block), or for "
                "consumers to catch up (flow control).",
            },
        },
        {
            "sockets": {"type": "object"},
            "producers": {"type": "object"},
            "cluster": {
                **_object({"name": _string(), "node": _string()}),
                "description": "On a node of a cluster: the cluster's name and this node's "
                "(the nodes: `/api/cluster`).",
            },
        },
    ),
}


def lists() -> dict[str, Schema]:
    return {
        "ConnectionList": _object({"connections": {"type": "array", "items": _ref("Connection")}}),
        "ConsumerList": _object({"consumers": {"type": "array", "items": _ref("Consumer")}}),
        "SubscriptionList": _object(
            {"subscriptions": {"type": "array", "items": _ref("Subscription")}}
        ),
        "CursorList": _object({"cursors": {"type": "array", "items": _ref("Cursor")}}),
        "Prepared": _object({"prepared": {"type": "array", "items": _string()}}),
    }
