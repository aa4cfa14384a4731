"""etcd's v3 API as JSON, sans-IO: requests built as (path, body), answers parsed.

etcd serves its gRPC API as JSON over HTTP too (the "gRPC gateway", under ``/v3/``
since etcd 3.4). Every call is a POST of one JSON object; keys and values travel as
base64, int64 fields as JSON *strings* (``"revision": "2"``), and fields at their zero
value are left out (a failed transaction has no ``"succeeded"``, an empty range no
``"kvs"``, an expired lease's keep-alive no ``"TTL"``). A watch answers with one JSON
object per line, each ``{"result": ...}`` or ``{"error": ...}``.

This module only turns Python values into those bodies and bodies back into frozen
dataclasses, and maps an error body to a typed exception
(:func:`error_from_body`); it never touches a socket, so every rule here is tested
without an etcd. :mod:`chute.cluster.etcd` carries the bodies over HTTP.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from chute.cluster.errors import EtcdAuthError, EtcdError, EtcdUnavailable, LeaseNotFound

API_PREFIX: Final = "/v3"
"""etcd 3.4 serves the gateway at ``/v3/`` (and the older ``/v3beta/``); 3.5+ only ``/v3/``."""

Body = dict[str, Any]

# gRPC status codes etcd uses (google.golang.org/grpc/codes)
_INVALID_ARGUMENT: Final = 3
_NOT_FOUND: Final = 5
_PERMISSION_DENIED: Final = 7
_UNAVAILABLE: Final = 14
_UNAUTHENTICATED: Final = 16


class EventType(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it; ``lease`` is 0 for a key bound to no lease."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    """The keys read and the store's revision they were read at."""

    kvs: tuple[KeyValue, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Whether the comparisons held, the revision after the transaction, and the keys
    read by the branch that ran (the current value when a create-if-absent failed)."""

    succeeded: bool
    revision: int
    kvs: tuple[KeyValue, ...]


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """One line of a watch stream. ``compact_revision`` is set when etcd cancelled the
    watch because the revision it was to start from has been compacted away."""

    revision: int
    events: tuple[WatchEvent, ...]
    created: bool
    canceled: bool
    compact_revision: int
    cancel_reason: str


# -- comparisons and operations of a transaction ------------------------------------


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes
    prefix: bool = False


Operation = Put | Get | Delete


class Target(enum.Enum):
    CREATE = "create_revision"
    MOD = "mod_revision"
    VERSION = "version"
    LEASE = "lease"


@dataclass(frozen=True, slots=True)
class Compare:
    """``key``'s ``target`` EQUAL to ``value`` (``Compare(k, Target.CREATE, 0)``: k absent)."""

    key: bytes
    target: Target
    value: int


# -- encoding ----------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``:
    the prefix with its last byte below 0xff incremented (etcd's ``GetPrefixRangeEnd``);
    ``b"\\0"`` (every key) when there is none."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def _key_range(key: bytes, prefix: bool) -> Body:
    body: Body = {"key": b64(key)}
    if prefix:
        body["range_end"] = b64(prefix_end(key))
    return body


def range_request(key: bytes, *, prefix: bool = False) -> tuple[str, Body]:
    return f"{API_PREFIX}/kv/range", _key_range(key, prefix)


def _put_body(op: Put) -> Body:
    body: Body = {"key": b64(op.key), "value": b64(op.value)}
    if op.lease:
        body["lease"] = str(op.lease)
    return body


def put_request(key: bytes, value: bytes, *, lease: int = 0) -> tuple[str, Body]:
    return f"{API_PREFIX}/kv/put", _put_body(Put(key, value, lease))


def delete_request(key: bytes, *, prefix: bool = False) -> tuple[str, Body]:
    return f"{API_PREFIX}/kv/deleterange", _key_range(key, prefix)


def _operation(op: Operation) -> Body:
    if isinstance(op, Put):
        return {"request_put": _put_body(op)}
    if isinstance(op, Get):
        return {"request_range": _key_range(op.key, op.prefix)}
    return {"request_delete_range": _key_range(op.key, op.prefix)}


def txn_request(
    compare: Sequence[Compare], success: Sequence[Operation], failure: Sequence[Operation] = ()
) -> tuple[str, Body]:
    body: Body = {
        "compare": [
            {
                "key": b64(c.key),
                "result": "EQUAL",
                "target": c.target.name,
                c.target.value: str(c.value),
            }
            for c in compare
        ],
        "success": [_operation(op) for op in success],
        "failure": [_operation(op) for op in failure],
    }
    return f"{API_PREFIX}/kv/txn", body


def lease_grant_request(ttl: int) -> tuple[str, Body]:
    return f"{API_PREFIX}/lease/grant", {"TTL": str(ttl)}


def lease_keepalive_request(lease: int) -> tuple[str, Body]:
    return f"{API_PREFIX}/lease/keepalive", {"ID": str(lease)}


def lease_revoke_request(lease: int) -> tuple[str, Body]:
    return f"{API_PREFIX}/lease/revoke", {"ID": str(lease)}


def authenticate_request(user: str, password: str) -> tuple[str, Body]:
    return f"{API_PREFIX}/auth/authenticate", {"name": user, "password": password}


def watch_request(key: bytes, *, start_revision: int, prefix: bool = True) -> tuple[str, Body]:
    """A watch from ``start_revision`` (never 0: "from now" would miss what happened
    between the caller's read and the watch's start)."""
    if start_revision < 1:
        raise ValueError(f"a watch starts at a revision >= 1, not {start_revision}")
    create = _key_range(key, prefix)
    create["start_revision"] = str(start_revision)
    return f"{API_PREFIX}/watch", {"create_request": create}


# -- decoding ----------------------------------------------------------------------
# Whatever comes back (an etcd of another version, or something else listening on
# the port) raises EtcdError at worst, never a TypeError or AttributeError.


def _object(raw: object, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise EtcdError(f"etcd sent {what}={str(raw)[:200]!r}, not an object")
    return raw


def _objects(body: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    raw = body.get(name, ())
    if not isinstance(raw, list | tuple):
        raise EtcdError(f"etcd sent {name}={str(raw)[:200]!r}, not a list")
    return [_object(item, name) for item in raw]


def _int(body: Mapping[str, Any], name: str) -> int:
    """An int64 field: a JSON string of digits (or a number, as older gateways sent)."""
    raw = body.get(name, 0)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            return int(raw)
    raise EtcdError(f"etcd sent {name}={str(raw)[:200]!r}, not an integer")


def _bytes(body: Mapping[str, Any], name: str) -> bytes:
    raw = body.get(name, "")
    try:
        return base64.b64decode(raw, validate=True)
    except (TypeError, ValueError, binascii.Error):
        raise EtcdError(f"etcd sent {name}={str(raw)[:200]!r}, not base64") from None


def _header_revision(body: Mapping[str, Any]) -> int:
    return _int(_object(body.get("header", {}), "header"), "revision")


def parse_kv(body: Mapping[str, Any]) -> KeyValue:
    return KeyValue(
        key=_bytes(body, "key"),
        value=_bytes(body, "value"),
        create_revision=_int(body, "create_revision"),
        mod_revision=_int(body, "mod_revision"),
        version=_int(body, "version"),
        lease=_int(body, "lease"),
    )


def _kvs(body: Mapping[str, Any]) -> tuple[KeyValue, ...]:
    return tuple(parse_kv(kv) for kv in _objects(body, "kvs"))


def parse_range(body: Mapping[str, Any]) -> RangeResult:
    return RangeResult(kvs=_kvs(body), revision=_header_revision(body))


def parse_revision(body: Mapping[str, Any]) -> int:
    """The store's revision after a put or a delete."""
    return _header_revision(body)


def parse_txn(body: Mapping[str, Any]) -> TxnResult:
    kvs: list[KeyValue] = []
    for response in _objects(body, "responses"):
        if "response_range" in response:
            kvs.extend(_kvs(_object(response["response_range"], "response_range")))
    return TxnResult(
        succeeded=body.get("succeeded", False) is True,
        revision=_header_revision(body),
        kvs=tuple(kvs),
    )


def parse_lease(body: Mapping[str, Any]) -> Lease:
    return Lease(id=_int(body, "ID"), ttl=_int(body, "TTL"))


def parse_keepalive(body: Mapping[str, Any], lease: int) -> int:
    """The lease's TTL after a keep-alive. etcd answers an expired (or unknown) lease
    with no TTL at all, which is :class:`LeaseNotFound`, not a parse error."""
    ttl = _int(_object(body.get("result", body), "result"), "TTL")
    if ttl <= 0:
        raise LeaseNotFound(f"lease {lease:x} has expired", grpc_code=_NOT_FOUND)
    return ttl


def parse_token(body: Mapping[str, Any]) -> str:
    token = body.get("token")
    if not isinstance(token, str) or not token:
        raise EtcdAuthError("etcd's authenticate answer carries no token")
    return token


def parse_watch_line(line: bytes) -> WatchResponse:
    """One line of a watch stream (raises the error a line reports)."""
    try:
        body = json.loads(line)
    except ValueError:
        raise EtcdError(f"etcd sent a watch line that is not JSON: {line[:200]!r}") from None
    if not isinstance(body, Mapping):
        raise EtcdError(f"etcd sent a watch line that is not an object: {line[:200]!r}")
    if "error" in body and "result" not in body:
        raise error_from_body(0, body)
    result = _object(body.get("result", {}), "result")
    events = tuple(
        WatchEvent(
            type=EventType.DELETE if event.get("type") == "DELETE" else EventType.PUT,
            kv=parse_kv(_object(event.get("kv", {}), "kv")),
        )
        for event in _objects(result, "events")
    )
    return WatchResponse(
        revision=_header_revision(result),
        events=events,
        created=result.get("created", False) is True,
        canceled=result.get("canceled", False) is True,
        compact_revision=_int(result, "compact_revision"),
        cancel_reason=str(result.get("cancel_reason", "")),
    )


def error_from_body(status: int, body: object) -> EtcdError:
    """The typed error an error answer stands for.

    The gateway writes unary errors as ``{"error": msg, "message": msg, "code": n}`` and
    stream errors as ``{"error": {"grpc_code": n, "message": msg, ...}}``; ``n`` is a gRPC
    status code."""
    if not isinstance(body, Mapping):
        return EtcdError(f"etcd refused the request (HTTP {status}): {str(body)[:200]!r}")
    error = body.get("error")
    fields = error if isinstance(error, Mapping) else body
    message = str(fields.get("message") or error or "")[:500]
    try:
        code = _int(fields, "grpc_code" if fields is error else "code")
    except EtcdError:
        code = 0
    message = message or f"HTTP {status}"
    text = f"etcd refused the request: {message}"
    if code in (_UNAUTHENTICATED, _PERMISSION_DENIED) or (
        code == _INVALID_ARGUMENT and ("authentication" in message or "user name" in message)
    ):
        return EtcdAuthError(text, grpc_code=code)
    if code == _NOT_FOUND and "lease" in message:
        return LeaseNotFound(text, grpc_code=code)
    if code == _UNAVAILABLE:
        return EtcdUnavailable(text, grpc_code=code)
    return EtcdError(text, grpc_code=code)
