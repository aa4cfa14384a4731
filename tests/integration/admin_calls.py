"""Calling the admin API over HTTP as curl or a script would, for the tests of the API.

Plain urllib requests with HTTP Basic credentials against a ``chute serve``
subprocess (:class:`Broker`: the server and its HTTP port); :func:`call` returns
every answer whatever its status, :func:`expect_error` checks the error body
the API gives. The users the admin tests log in as are here too, as TOML to
put in a broker's configuration.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import chute

from .conftest import ChuteServer

ADMIN = ("admin", "admin-pw")
VIEWER = ("viewer", "viewer-pw")
ALICE = ("alice", "alice-pw")
USERS = """
[users.admin]
password = "admin-pw"
roles = ["admin"]

[users.viewer]
password = "viewer-pw"
roles = ["app"]

[roles.app]
send = ["*"]
consume = ["*"]
browse = ["*"]
create = ["*"]
delete = ["*"]
"""
"""An admin, and a viewer who may use every destination but manage none."""
ALICE_USERS = """
[users.admin]
password = "admin-pw"
roles = ["admin"]

[users.alice]
password = "alice-pw"
roles = ["alice"]

[roles.alice]
manage = ["queue:alice.*"]
send = ["queue:alice.*"]
consume = ["queue:alice.*"]
browse = ["queue:alice.*"]
create = ["queue:alice.*"]
"""
"""An admin, and alice, who may manage and use only the queues ``alice.*``."""
DEADLINE = 15.0


@dataclass
class Broker:
    """A ``chute serve`` and its admin API's port."""

    server: ChuteServer
    http: int

    @property
    def url(self) -> str:
        return self.server.url

    def connect(self, **kwargs: Any) -> chute.Connection:
        return chute.connect(self.url, login=ADMIN[0], passcode=ADMIN[1], **kwargs)


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


def call(
    broker: Broker,
    method: str,
    path: str,
    body: Any = None,
    *,
    auth: tuple[str, str] | None = ADMIN,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout: float = DEADLINE,
) -> Answer:
    """One request to the API; the answer whatever its status."""
    sent = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        sent["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http}{path}", data=data, method=method, headers=sent
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, payload, got = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, payload, got = error.code, error.read(), dict(error.headers)
    if payload:
        assert got["Content-Type"].startswith("application/json"), payload
    return Answer(status, json.loads(payload) if payload else None, got)


def quote(address: str) -> str:
    """``address`` as one segment of an API path (``queue:a/b`` -> ``queue:a%2Fb``)."""
    return urllib.parse.quote(address, safe=":")


def expect_error(answer: Answer, status: int, code: str | None = None) -> str:
    """Check that ``answer`` is the API's error body with ``status`` (and ``code``);
    returns its message."""
    assert answer.status == status, answer
    assert set(answer.body) == {"error", "message"}, answer.body
    if code is not None:
        assert answer.body["error"] == code, answer.body
    message: str = answer.body["message"]
    return message


def until(condition: Callable[[], Any], what: str) -> Any:
    """Poll ``condition`` until it gives something true (the broker's state is what is
    awaited), for :data:`DEADLINE` seconds at most; returns what it gave."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
