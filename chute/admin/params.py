"""Reading an admin API request: query and path parameters, and JSON bodies.

Each reader checks what the OpenAPI document (:mod:`chute.admin.openapi`)
promises and nothing more: an integer is decimal digits within int64, a
boolean is ``true`` or ``false``, a body is one JSON object with the fields
the operation names (of their types) and no others. Anything else is an
:class:`~chute.admin.auth.ApiError` 400 that says which parameter or field,
and what it should be.

Pure, except :func:`json_body`, which reads the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from chute.admin.auth import ApiError
from chute.admin.openapi import INT64_MAX

MAX_SEQS: Final = 10000
_DIGITS: Final = re.compile(r"[0-9]{1,19}")


def bad(message: str, code: str = "bad-request") -> ApiError:
    return ApiError(400, code, message)


def integer(text: str, name: str) -> int:
    """A non-negative int64 written in decimal.

    Raises:
        ApiError: 400, it is not one.
    """
    if _DIGITS.fullmatch(text) is None or int(text) > INT64_MAX:
        raise bad(f"{name} must be a whole number from 0 to {INT64_MAX}, not {text[:40]!r}")
    return int(text)


def query_int(query: Mapping[str, str], name: str, default: int = 0) -> int:
    text = query.get(name)
    return default if text is None else integer(text, name)


def query_bool(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name)
    if text is None:
        return False
    if text not in ("true", "false"):
        raise bad(f"{name} must be true or false, not {text[:40]!r}")
    return text == "true"


async def json_body(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The request's JSON object ({} for no body, when the body is optional).

    Raises:
        ApiError: 400, no body when one is required, or not a JSON object.
        web.HTTPRequestEntityTooLarge: larger than the application allows.
    """
    raw = await request.read()
    if not raw.strip():
        if required:
            raise bad('send a JSON object as the request body (e.g. {"to": "queue:x"})')
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise bad(f"the request body is not valid JSON: {exc}", "bad-json") from None
    if not isinstance(data, dict):
        raise bad(f"the request body must be a JSON object, not {type(data).__name__}")
    return data


def fields(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse fields other than ``allowed``."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise bad(f"unknown field(s) {', '.join(unknown)}: this request takes {', '.join(allowed)}")


def string_field(body: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad(f"the field {name} is required (a string)")
        return None
    if not isinstance(value, str):
        raise bad(f"the field {name} must be a string, not {type(value).__name__}")
    return value


def bool_field(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad(f"the field {name} must be true or false")
    return value


def int_field(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise bad(f"the field {name} must be a whole number from 0 to {INT64_MAX}")
    return value


def seqs_field(body: Mapping[str, Any]) -> list[int] | None:
    value = body.get("seqs")
    if value is None and "seqs" not in body:
        return None
    if not isinstance(value, list) or len(value) > MAX_SEQS:
        raise bad(f"the field seqs must be a list of at most {MAX_SEQS} sequence numbers")
    for seq in value:
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= INT64_MAX:
            raise bad(f"the field seqs must hold whole numbers from 0 to {INT64_MAX}")
    return value
