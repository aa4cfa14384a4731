"""The building blocks of the admin API's OpenAPI document (:mod:`chute.admin.openapi`):
JSON schemas, parameters, and an operation with the error answers it may give.

Pure data and functions.
"""

from __future__ import annotations

from typing import Any, Final

JSON: Final = "application/json"
INT64_MAX: Final = (1 << 63) - 1

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _int(minimum: int = 0) -> Schema:
    return {"type": "integer", "format": "int64", "minimum": minimum, "maximum": INT64_MAX}


def _string(nullable: bool = False) -> Schema:
    return {"type": "string", "nullable": True} if nullable else {"type": "string"}


def _object(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these fields (more may come: the core may report more)."""
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def _body(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """A request body: these fields and no others."""
    schema = _object(required, optional)
    schema["additionalProperties"] = False
    if not required:
        del schema["required"]
    return schema


_ERRORS: Final = {
    400: "A bad address, selector, parameter or JSON body.",
    401: "No credentials, or wrong ones (users are configured).",
    403: "The user lacks the `manage` permission, or a web page from another origin asked.",
    404: "No such destination, message, connection or transaction (or path).",
    409: "The operation conflicts with the destination's state (consumers, a transaction).",
    413: "The request body is larger than 1 MiB.",
    415: "The request body is not `application/json`.",
    429: "This client address failed to log in too often lately: wait.",
    503: "The store could not make the change durable (a disk fault).",
}


def _error(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": _ERRORS[status],
        "content": {JSON: {"schema": _ref("Error")}},
    }
    if status == 401:
        response["headers"] = {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}}
    if status == 429:
        response["headers"] = {"Retry-After": {"required": True, "schema": {"type": "string"}}}
    return response


def _ok(schema: str | None, description: str) -> dict[str, Any]:
    if schema is None:
        return {"description": description}
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


def _param(name: str, where: str, schema: Schema, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema,
        "description": description,
    }


ADDRESS: Final = _param(
    "address",
    "path",
    {"type": "string", "minLength": 1},
    "`queue:NAME`, `topic:NAME` or `stream:NAME` (a bare NAME is a queue), URL-encoded.",
)
SEQ: Final = _param("seq", "path", _int(), "A message's sequence number in its queue.")
XID: Final = _param("xid", "path", {"type": "string", "minLength": 1}, "A prepared xid.")


def _operation(
    summary: str,
    ok: dict[int, dict[str, Any]],
    errors: tuple[int, ...],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: Schema | None = None,
    body_required: bool = True,
    changes: bool = False,
) -> dict[str, Any]:
    statuses = {401, 403, 429, *errors}
    if parameters:
        statuses.add(400)
    if body is not None:
        statuses |= {400, 413, 415}
    if changes:
        statuses |= {409, 503}
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {
            **{str(code): response for code, response in ok.items()},
            **{str(code): _error(code) for code in sorted(statuses)},
        },
    }
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {
            "required": body_required,
            "content": {JSON: {"schema": body}},
        }
    return operation
