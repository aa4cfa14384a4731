"""The admin API's operations that publish a message to a destination and take messages
from a queue (as RabbitMQ's console's "Publish message" and "Get messages"), for the
OpenAPI document (:mod:`chute.admin.openapi`, which holds the ``Message`` schema).

Pure data.
"""

from __future__ import annotations

from typing import Any, Final

from chute.admin.openapi_base import (
    ADDRESS,
    Schema,
    _body,
    _int,
    _object,
    _ok,
    _operation,
    _ref,
    _string,
)
from chute.core.operations.manage import MAX_TAKE
from chute.message import BodyKind

MESSAGE_SCHEMAS: Final[dict[str, Schema]] = {
    "Published": _object({"published": {"type": "boolean"}, "id": _string()}),
    "Taken": _object(
        {
            "messages": {"type": "array", "items": _ref("Message")},
            "requeued": {
                "type": "boolean",
                "description": "They were given back (redelivered), not removed.",
            },
        }
    ),
}

_PUBLISH: Final = {
    "body": _string(),
    "body_encoding": {"type": "string", "enum": ["utf-8", "base64"]},
    "kind": {"type": "string", "enum": [k.value for k in BodyKind]},
    "content_type": {**_string(), "description": "Kept as the content-type property."},
    "properties": {
        "type": "object",
        "additionalProperties": {
            "oneOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, _string()]
        },
    },
    "priority": {"type": "integer", "minimum": 0, "maximum": 9},
    "persistent": {"type": "boolean"},
    "ttl": {**_int(), "description": "Milliseconds it lives (0: never expires)."},
    "correlation_id": _string(),
    "reply_to": _string(),
    "type": _string(),
}


def message_operations() -> dict[str, Any]:
    """The path items of publishing and taking."""
    return {
        "/api/destinations/{address}/publish": {
            "parameters": [ADDRESS],
            "post": _operation(
                "Publish a message to an existing destination (needs send on it too).",
                {200: _ok("Published", "Accepted, and stored if persistent.")},
                (404,),
                body=_body({}, _PUBLISH),
                changes=True,
            ),
        },
        "/api/destinations/{address}/get": {
            "parameters": [ADDRESS],
            "post": _operation(
                "Take waiting messages of a queue as a consumer would (needs consume on it "
                "too): removed, or with requeue given back redelivered.",
                {200: _ok("Taken", "The messages taken, as delivered.")},
                (404,),
                body=_body(
                    {},
                    {
                        "count": {"type": "integer", "minimum": 1, "maximum": MAX_TAKE},
                        "requeue": {"type": "boolean"},
                    },
                ),
                body_required=False,
                changes=True,
            ),
        },
    }
