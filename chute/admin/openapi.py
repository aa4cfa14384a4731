"""The admin API's OpenAPI 3.0 document, served at ``/api/openapi.json``.

Written out by hand, next to nothing else, so that it reads as the API's
reference: every path, parameter, request body and response (errors
included) the handlers of :mod:`chute.admin.api` give, with their JSON
schemas. A test runs schemathesis against it on a live broker, so a handler
that answers anything the document does not describe fails it. Objects the
core reports may gain fields (``additionalProperties`` is left open on
them); request bodies may not (an unknown field is a 400).

Pure data: built once, by :func:`document`.
"""

from __future__ import annotations

from typing import Any, Final

from chute.admin.openapi_base import (
    ADDRESS,
    INT64_MAX,
    JSON,
    SEQ,
    XID,
    Schema,
    _body,
    _error,
    _int,
    _object,
    _ok,
    _operation,
    _param,
    _ref,
    _string,
)
from chute.admin.openapi_cluster import CLUSTER_SCHEMAS, cluster_operations
from chute.admin.openapi_messages import MESSAGE_SCHEMAS, message_operations
from chute.admin.rates import COUNTERS
from chute.version import __version__

__all__ = ["INT64_MAX", "JSON", "document"]

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

SELECTOR_BODY: Final = {"selector": {**_string(nullable=True), "description": "A JMS selector."}}
SEQS_BODY: Final = {
    "seqs": {
        "type": "array",
        "items": _int(),
        "maxItems": 10000,
        "description": "Only these sequence numbers.",
    },
    "limit": {**_int(), "description": "At most this many (0: no limit)."},
}


def _paths() -> dict[str, Any]:
    paths = {**_operations(), **cluster_operations(), **message_operations()}
    for item in paths.values():  # a bad path parameter is a 400 too
        if "parameters" in item:
            for key, operation in item.items():
                if key != "parameters":
                    operation["responses"].setdefault("400", _error(400))
    return paths


def _operations() -> dict[str, Any]:
    limit = _param("limit", "query", _int(), "At most this many (0 or above 1000: 1000).")
    return {
        "/api/openapi.json": {
            "get": {
                "summary": "This document.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The OpenAPI document.",
                        "content": {JSON: {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/api/overview": {
            "get": _operation(
                "The broker at a glance.", {200: _ok("Overview", "The overview.")}, (404,)
            )
        },
        "/api/destinations": {
            "get": _operation(
                "A page of destinations, in address order, with counters and rates.",
                {200: _ok("DestinationPage", "A page.")},
                (404,),
                parameters=[
                    _param(
                        "pattern",
                        "query",
                        _string(),
                        "Only addresses matching it (`*` for any characters).",
                    ),
                    _param(
                        "contains",
                        "query",
                        _string(),
                        "Only addresses holding this text (case-insensitively).",
                    ),
                    _param("after", "query", _string(), "The previous page's `next`."),
                    limit,
                ],
            ),
            "post": _operation(
                "Create a queue, topic or stream.",
                {
                    201: _ok("Created", "Created."),
                    200: _ok("Created", "It existed (`created` false)."),
                },
                (404,),
                body=_body({"address": _string()}),
                changes=True,
            ),
        },
        "/api/destinations/{address}": {
            "parameters": [ADDRESS],
            "get": _operation(
                "One destination, with its consumers.",
                {200: _ok("DestinationDetail", "The destination.")},
                (404,),
            ),
            "delete": _operation(
                "Delete a destination and every message it holds.",
                {200: _ok("Deleted", "Deleted; how many messages went.")},
                (404, 409),
                parameters=[
                    _param(
                        "force",
                        "query",
                        {"type": "boolean"},
                        "Also delete a topic's durable subscriptions.",
                    )
                ],
                changes=True,
            ),
        },
        "/api/destinations/{address}/purge": {
            "parameters": [ADDRESS],
            "post": _operation(
                "Remove every waiting message of a queue (in-flight ones stay), or every "
                "message a stream keeps.",
                {200: _ok("Purged", "How many went.")},
                (404,),
                changes=True,
            ),
        },
        "/api/destinations/{address}/messages": {
            "parameters": [ADDRESS],
            "get": _operation(
                "A page of a queue's or stream's messages, in sequence (a stream's: offset) order; "
                "nothing is consumed.",
                {200: _ok("MessagePage", "A page.")},
                (404,),
                parameters=[
                    _param("after", "query", _int(), "The previous page's `after` (0: start)."),
                    _param("before", "query", _int(), "The previous page's `before`."),
                    limit,
                    _param("selector", "query", _string(), "A JMS selector."),
                ],
            ),
        },
        "/api/destinations/{address}/messages/{seq}": {
            "parameters": [ADDRESS, SEQ],
            "delete": _operation(
                "Delete one waiting message of a queue (a stream: 400).",
                {200: _ok("Deleted", "Deleted.")},
                (404,),
                changes=True,
            ),
        },
        "/api/destinations/{address}/move": {
            "parameters": [ADDRESS],
            "post": _operation(
                "Start moving a queue's waiting messages to another destination, in sequence "
                "order (a stream: 400); follow the job at its `Location`.",
                {202: _ok("MoveJob", "The move job, started.")},
                (404,),
                body=_body({"to": _string()}, {**SELECTOR_BODY, **SEQS_BODY}),
                changes=True,
            ),
        },
        "/api/destinations/{address}/retry": {
            "parameters": [ADDRESS],
            "post": _operation(
                "Start sending dead letters back to the destination each came from (a "
                "stream: 400); follow the job at its `Location`.",
                {202: _ok("MoveJob", "The retry job, started.")},
                (404,),
                body=_body({}, {**SELECTOR_BODY, **SEQS_BODY}),
                body_required=False,
                changes=True,
            ),
        },
        "/api/moves": {
            "get": _operation(
                "Move and retry jobs: the running ones and the last finished, newest first.",
                {200: _ok("MoveJobList", "The jobs.")},
                (404,),
            )
        },
        "/api/moves/{id}": {
            "parameters": [_param("id", "path", {"type": "string"}, "A move job's id.")],
            "get": _operation(
                "One move or retry job: how far it got.",
                {200: _ok("MoveJob", "The job.")},
                (404,),
            ),
            "delete": _operation(
                "Cancel a running job after the step it is in (each message stays in the "
                "source or in the target); a finished one is left as it is.",
                {200: _ok("MoveJob", "The job, as it ended.")},
                (404,),
                changes=True,
            ),
        },
        "/api/connections": {
            "get": _operation(
                "The connected clients.",
                {200: _ok("ConnectionList", "The connections.")},
                (404,),
            )
        },
        "/api/connections/{id}": {
            "parameters": [_param("id", "path", {"type": "string"}, "A connection's id.")],
            "delete": _operation(
                "Close a client's connection.", {204: _ok(None, "Closed.")}, (404,)
            ),
        },
        "/api/consumers": {
            "get": _operation(
                "The consumers, of every destination or of one.",
                {200: _ok("ConsumerList", "The consumers.")},
                (404,),
                parameters=[_param("address", "query", _string(), "Only this destination's.")],
            )
        },
        "/api/subscriptions": {
            "get": _operation(
                "Durable and callback subscriptions.",
                {200: _ok("SubscriptionList", "The subscriptions.")},
                (404,),
            )
        },
        "/api/transactions": {
            "get": _operation(
                "Prepared transactions waiting for commit or rollback.",
                {200: _ok("Prepared", "Their xids.")},
                (404,),
            )
        },
        "/api/transactions/{xid}/commit": {
            "parameters": [XID],
            "post": _operation(
                "Commit a prepared transaction.",
                {204: _ok(None, "Committed.")},
                (404, 409),
                changes=True,
            ),
        },
        "/api/transactions/{xid}/rollback": {
            "parameters": [XID],
            "post": _operation(
                "Roll back a prepared transaction.",
                {204: _ok(None, "Rolled back.")},
                (404, 409),
                changes=True,
            ),
        },
        "/api/cursors": {
            "get": _operation(
                "Open cursors (the Spark connector's reads).",
                {200: _ok("CursorList", "The cursors.")},
                (404,),
            )
        },
    }


def _lists() -> dict[str, Schema]:
    return {
        "ConnectionList": _object({"connections": {"type": "array", "items": _ref("Connection")}}),
        "ConsumerList": _object({"consumers": {"type": "array", "items": _ref("Consumer")}}),
        "SubscriptionList": _object(
            {"subscriptions": {"type": "array", "items": _ref("Subscription")}}
        ),
        "CursorList": _object({"cursors": {"type": "array", "items": _ref("Cursor")}}),
        "Prepared": _object({"prepared": {"type": "array", "items": _string()}}),
    }


def document() -> dict[str, Any]:
    """The whole OpenAPI document (a new dict each call)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "chute admin API",
            "version": __version__,
            "description": (
                "Manage a chute broker over HTTP: destinations, messages, connections, "
                "consumers, subscriptions, prepared transactions and cursors. With users "
                "configured, every request needs HTTP Basic credentials of a user with the "
                "`manage` permission; without, anyone on loopback may do everything. "
                "Errors are JSON `{error, message}`."
            ),
        },
        "paths": _paths(),
        "components": {
            "schemas": {**SCHEMAS, **CLUSTER_SCHEMAS, **MESSAGE_SCHEMAS, **_lists()},
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basic": []}, {}],
    }
