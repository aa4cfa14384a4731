"""The API is declared once (chute.client.api) and every client conforms to it.

mypy checks conformance statically through the functions below (each returns
a client's object as the protocol type: a missing method or a different
signature is a type error). The tests check the same at run time, parameter
by parameter, so that a client cannot drift even where typing is loose.
"""

from __future__ import annotations

import inspect

import pytest

import chute
import chute.aio
from chute.client import aio_client, api, blocking
from chute.dropbox import client as dropbox
from chute.dropbox.consumer import DropboxConsumer

# -- static conformance (mypy) ------------------------------------------------------------


def _as_api(
    connections: tuple[blocking.BlockingConnection, dropbox.DropboxConnection],
    sessions: tuple[blocking.BlockingSession, dropbox.DropboxSession],
    consumers: tuple[blocking.BlockingConsumer, DropboxConsumer],
) -> tuple[list[api.Connection], list[api.Session], list[api.Consumer]]:
    return list(connections), list(sessions), list(consumers)


def _as_async_api(
    c: aio_client.AioConnection, s: aio_client.AioSession, k: aio_client.AioConsumer
) -> tuple[api.AsyncConnection, api.AsyncSession, api.AsyncConsumer]:
    return c, s, k


# -- the same at run time ----------------------------------------------------------------

PAIRS = [
    (api.Connection, blocking.BlockingConnection),
    (api.Session, blocking.BlockingSession),
    (api.Consumer, blocking.BlockingConsumer),
    (api.Connection, dropbox.DropboxConnection),
    (api.Session, dropbox.DropboxSession),
    (api.Consumer, DropboxConsumer),
    (api.AsyncConnection, aio_client.AioConnection),
    (api.AsyncSession, aio_client.AioSession),
    (api.AsyncConsumer, aio_client.AioConsumer),
]


def members(protocol: type) -> list[str]:
    return sorted(
        name
        for name in vars(protocol)
        if not name.startswith("_") or name in ("__iter__", "__aiter__", "__enter__", "__exit__")
    )


@pytest.mark.parametrize(("protocol", "cls"), PAIRS, ids=lambda x: x.__qualname__)
def test_every_method_of_the_api_is_there_with_its_parameters(protocol: type, cls: type) -> None:
    for name in members(protocol):
        declared = inspect.getattr_static(protocol, name)
        if isinstance(declared, property):  # may be an instance attribute: mypy checks it
            continue
        assert hasattr(cls, name), f"{cls.__qualname__} lacks {name}"
        implemented = getattr(cls, name)
        want = list(inspect.signature(declared).parameters.values())
        got = list(inspect.signature(implemented).parameters.values())
        assert [(p.name, p.kind, p.default) for p in got] == [
            (p.name, p.kind, p.default) for p in want
        ], f"{cls.__qualname__}.{name}"


@pytest.mark.parametrize(
    ("protocol", "cls"), [p for p in PAIRS if p[0].__name__.startswith("Async")]
)
def test_what_the_async_api_awaits_the_asyncio_client_awaits(protocol: type, cls: type) -> None:
    for name in members(protocol):
        declared = inspect.getattr_static(protocol, name)
        if inspect.iscoroutinefunction(declared) and name != "receive":
            assert inspect.iscoroutinefunction(getattr(cls, name)), f"{cls.__qualname__}.{name}"


def test_chute_exports_the_api_and_connect_returns_it() -> None:
    assert chute.Connection is api.Connection
    assert chute.Session is api.Session
    assert chute.Consumer is api.Consumer
    assert inspect.signature(chute.connect).return_annotation in ("Connection", api.Connection)
    assert chute.aio.Connection is aio_client.AioConnection
