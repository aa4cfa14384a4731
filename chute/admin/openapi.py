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
    _body,
    _error,
    _int,
    _ok,
    _operation,
    _param,
    _string,
)
from chute.admin.openapi_cluster import CLUSTER_SCHEMAS, cluster_operations
from chute.admin.openapi_messages import MESSAGE_SCHEMAS, message_operations
from chute.admin.openapi_schemas import SCHEMAS, lists
from chute.version import __version__

__all__ = ["INT64_MAX", "JSON", "document"]

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
            "schemas": {**SCHEMAS, **CLUSTER_SCHEMAS, **MESSAGE_SCHEMAS, **lists()},
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basic": []}, {}],
    }
