"""A small asyncio client for etcd's v3 API, over its JSON gateway and aiohttp.

Only what the cluster needs: leases (grant, keep-alive, revoke), put (optionally
under a lease), get and range by prefix, delete, transactions (with the two the
cluster uses named: :meth:`EtcdClient.create_if_absent` and
:meth:`EtcdClient.compare_and_swap`) and a prefix watch that survives reconnects.
The request and answer bodies are built and parsed in :mod:`chute.cluster.etcd_wire`;
this module only carries them.

**Endpoints.** The client is given every endpoint of the etcd cluster and sends each
request to the one that last answered; when it cannot be reached (refused, reset, no
answer in ``request_timeout``, or etcd itself says it is unavailable) the next is
tried, and when none answers the call raises :class:`EtcdUnavailable` naming each
endpoint and what went wrong there. A request that failed mid-way may have been
applied: callers make writes that can be repeated, or check (as the membership does
with a create-if-absent whose key carries its own lease).

**Watches.** :meth:`EtcdClient.watch` yields every change under a prefix from a
start revision. When its connection drops it reconnects (to any endpoint, with
backoff) and resumes from the revision after the last event it yielded, so no event
is lost or repeated; when etcd has compacted that revision away it reads the prefix
anew and yields a :class:`Snapshot` of it, then goes on from there.

An :class:`EtcdClient` belongs to one event loop; its methods may be called from
several tasks of that loop at once.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from chute.cluster import etcd_wire as wire
from chute.cluster.errors import EtcdAuthError, EtcdError, EtcdUnavailable
from chute.cluster.etcd_wire import (
    Compare,
    Get,
    KeyValue,
    Lease,
    Operation,
    Put,
    RangeResult,
    Target,
    TxnResult,
    WatchEvent,
)
from chute.cluster.url import ClusterUrl, Endpoint

MAX_WATCH_LINE: Final = 16 << 20
"""The longest line a watch stream may send (one batch of events)."""

_TRANSPORT_ERRORS: Final = (aiohttp.ClientError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every key under a watched prefix at ``revision``: what a watch yields in place of
    the events etcd compacted away. The watcher replaces what it knew with it."""

    kvs: tuple[KeyValue, ...]
    revision: int


WatchItem = WatchEvent | Snapshot


class Backoff:
    """Delays between retries: doubling from ``initial`` up to ``maximum``, each with up
    to a quarter of jitter so that nodes cut off together do not retry in step."""

    def __init__(self, initial: float = 0.1, maximum: float = 2.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def reset(self) -> None:
        self._next = self.initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay * (1 - random.random() / 4)  # noqa: S311 - jitter, not a secret

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())


class _Unreachable(Exception):
    """This endpoint could not be reached; try the next one. ``stale`` when a pooled
    connection broke (the etcd behind it restarted): worth one more try."""

    def __init__(self, reason: str, *, stale: bool = False) -> None:
        super().__init__(reason)
        self.stale = stale


def _unreachable(exc: BaseException) -> _Unreachable:
    # not "could not connect", not "no answer in time": a connection that broke under
    # the request (one from the pool, to an etcd that restarted since)
    stale = not isinstance(exc, aiohttp.ClientConnectorError | TimeoutError)
    if isinstance(exc, TimeoutError):
        reason = "no answer in time"
    else:
        reason = str(exc) or type(exc).__name__
    return _Unreachable(reason, stale=stale)


class EtcdClient:
    """An etcd v3 client over the JSON gateway (see the module's docstring)."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        user: str | None = None,
        password: str | None = None,
        request_timeout: float = 5.0,
        connect_timeout: float = 2.0,
    ) -> None:
        if not endpoints:
            raise ValueError("an etcd client needs at least one endpoint")
        self.endpoints = tuple(endpoints)
        self._user = user
        self._password = password or ""
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._watch_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        self._current = 0
        self._tokens: dict[Endpoint, str] = {}  # "": this etcd has no authentication
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_url(cls, url: ClusterUrl, **options: Any) -> EtcdClient:
        return cls(url.endpoints, user=url.user, password=url.password, **options)

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint requests go to first (the last one that answered)."""
        return self.endpoints[self._current]

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=False)
            )
        return self._session

    # -- one request, failing over between endpoints ---------------------------------

    async def _post(self, endpoint: Endpoint, path: str, body: wire.Body) -> wire.Body:
        headers = {}
        token = self._tokens.get(endpoint)
        if token:
            headers["Authorization"] = token
        try:
            async with self._http().post(
                endpoint.base_url + path, json=body, headers=headers, timeout=self._timeout
            ) as response:
                raw = await response.read()
                status = response.status
        except _TRANSPORT_ERRORS as exc:
            raise _unreachable(exc) from exc
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            if status >= 500:
                raise _Unreachable(f"HTTP {status}") from None
            raise EtcdError(f"{endpoint} answered HTTP {status} with no JSON") from None
        if status != 200 or (isinstance(answer, dict) and "error" in answer):
            error = wire.error_from_body(status, answer)
            if isinstance(error, EtcdUnavailable):
                raise _Unreachable(str(error))
            raise error
        if not isinstance(answer, dict):
            raise EtcdError(f"{endpoint} answered {path} with {raw[:200]!r}")
        return answer

    async def _authenticated(self, endpoint: Endpoint, path: str, body: wire.Body) -> wire.Body:
        if self._user is not None and endpoint not in self._tokens:
            await self._authenticate(endpoint)
        try:
            return await self._post(endpoint, path, body)
        except EtcdAuthError as exc:
            if self._user is None or "invalid auth token" not in str(exc):
                raise
        self._tokens.pop(endpoint, None)  # the token expired: log in again, once
        await self._authenticate(endpoint)
        return await self._post(endpoint, path, body)

    async def _authenticate(self, endpoint: Endpoint) -> None:
        if self._user is None:
            return
        path, body = wire.authenticate_request(self._user, self._password)
        try:
            answer = await self._post(endpoint, path, body)
        except EtcdAuthError as exc:
            raise EtcdAuthError(
                f"etcd at {endpoint} refused user {self._user!r}: {exc}", grpc_code=exc.grpc_code
            ) from None
        except EtcdError as exc:
            if "authentication is not enabled" not in str(exc):
                raise
            self._tokens[endpoint] = ""  # no authentication on this etcd: send no token
            return
        self._tokens[endpoint] = wire.parse_token(answer)

    async def call(self, request: tuple[str, wire.Body]) -> wire.Body:
        """Send one request to the first endpoint that answers; raise
        :class:`EtcdUnavailable` when none does. An endpoint whose pooled connection
        broke (an etcd restarted since) is tried once more, on a new connection."""
        path, body = request
        failures: dict[Endpoint, str] = {}
        count = len(self.endpoints)
        order = [(self._current + n) % count for n in range(count)]
        retried: set[int] = set()
        while order:
            index = order.pop(0)
            endpoint = self.endpoints[index]
            try:
                answer = await self._authenticated(endpoint, path, body)
            except _Unreachable as exc:
                failures[endpoint] = str(exc)
                if exc.stale and index not in retried:
                    retried.add(index)
                    order.insert(0, index)
                continue
            self._current = index
            return answer
        listed = "; ".join(f"{endpoint}: {reason}" for endpoint, reason in failures.items())
        raise EtcdUnavailable(f"etcd is unreachable ({listed})")

    # -- keys ------------------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        result = wire.parse_range(await self.call(wire.range_request(key)))
        return result.kvs[0] if result.kvs else None

    async def get_prefix(self, prefix: bytes) -> RangeResult:
        return wire.parse_range(await self.call(wire.range_request(prefix, prefix=True)))

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Store ``value`` at ``key`` (bound to ``lease`` unless 0); the new revision."""
        return wire.parse_revision(await self.call(wire.put_request(key, value, lease=lease)))

    async def delete(self, key: bytes, *, prefix: bool = False) -> int:
        return wire.parse_revision(await self.call(wire.delete_request(key, prefix=prefix)))

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Operation],
        failure: Sequence[Operation] = (),
    ) -> TxnResult:
        return wire.parse_txn(await self.call(wire.txn_request(compare, success, failure)))

    async def create_if_absent(self, key: bytes, value: bytes, *, lease: int = 0) -> TxnResult:
        """Put ``key`` only if it does not exist; when it does, the result is not
        ``succeeded`` and its ``kvs`` hold the key as it is."""
        return await self.txn(
            [Compare(key, Target.CREATE, 0)], [Put(key, value, lease)], [Get(key)]
        )

    async def compare_and_swap(
        self, key: bytes, mod_revision: int, value: bytes, *, lease: int = 0
    ) -> TxnResult:
        """Put ``key`` only if it was last changed at ``mod_revision``; when it was not,
        the result is not ``succeeded`` and its ``kvs`` hold the key as it is."""
        return await self.txn(
            [Compare(key, Target.MOD, mod_revision)], [Put(key, value, lease)], [Get(key)]
        )

    # -- leases ----------------------------------------------------------------------

    async def lease_grant(self, ttl: int) -> Lease:
        return wire.parse_lease(await self.call(wire.lease_grant_request(ttl)))

    async def lease_keepalive(self, lease: int) -> int:
        """Refresh ``lease``; its TTL. Raises :class:`LeaseNotFound` once it expired."""
        answer = await self.call(wire.lease_keepalive_request(lease))
        return wire.parse_keepalive(answer, lease)

    async def lease_revoke(self, lease: int) -> None:
        """Drop ``lease`` and every key bound to it (:class:`LeaseNotFound` if gone)."""
        await self.call(wire.lease_revoke_request(lease))

    # -- watch -----------------------------------------------------------------------

    async def watch(
        self,
        prefix: bytes,
        start_revision: int,
        *,
        backoff: Backoff | None = None,
        on_watching: Callable[[Endpoint], None] | None = None,
    ) -> AsyncGenerator[WatchItem, None]:
        """Every change under ``prefix`` from ``start_revision`` on, for as long as the
        caller iterates (see the module's docstring for reconnects and compaction).
        Unreachable endpoints are retried with ``backoff`` for ever: the caller
        decides, by cancelling, when to give up. ``on_watching`` is told the endpoint
        each time etcd has set the watch up (first, and after each reconnect): a stream
        that merely goes quiet cannot be told from a member that vanished, so a caller
        that sees its requests answered elsewhere can restart the watch."""
        retry = backoff or Backoff()
        next_revision = start_revision
        while True:
            endpoint = self.endpoint
            try:
                async for response in self._watch_stream(endpoint, prefix, next_revision):
                    retry.reset()
                    if response.created and on_watching is not None:
                        on_watching(endpoint)
                    if response.canceled:
                        if not response.compact_revision:
                            raise EtcdError(
                                f"etcd at {endpoint} cancelled a watch: {response.cancel_reason}"
                            )
                        snapshot = await self.get_prefix(prefix)
                        yield Snapshot(snapshot.kvs, snapshot.revision)
                        next_revision = snapshot.revision + 1
                        break
                    for event in response.events:
                        yield event
                        next_revision = event.kv.mod_revision + 1
                else:
                    await retry.sleep()  # etcd closed the stream: watch again, soon
            except (_Unreachable, EtcdUnavailable):
                self._current = (self.endpoints.index(endpoint) + 1) % len(self.endpoints)
                await retry.sleep()

    async def _watch_stream(
        self, endpoint: Endpoint, prefix: bytes, start_revision: int
    ) -> AsyncIterator[wire.WatchResponse]:
        """One watch over one HTTP request, until etcd closes it. etcd must set the
        watch up (its first line) within ``request_timeout``, as any request must
        answer: a member that accepts connections but never answers (stopped, or
        wedged) is left for the next one; after that the stream may be quiet for ever."""
        if self._user is not None and endpoint not in self._tokens:
            await self._authenticate(endpoint)
        path, body = wire.watch_request(prefix, start_revision=start_revision)
        headers = {}
        token = self._tokens.get(endpoint)
        if token:
            headers["Authorization"] = token
        try:
            async with asyncio.timeout(self._timeout.total):
                response = await self._http().post(
                    endpoint.base_url + path,
                    json=body,
                    headers=headers,
                    timeout=self._watch_timeout,
                )
                try:
                    if response.status != 200:
                        raw = await response.read()
                        try:
                            answer = json.loads(raw)
                        except ValueError:
                            raise _Unreachable(f"HTTP {response.status}") from None
                        raise wire.error_from_body(response.status, answer)
                    lines = _Lines(response.content, endpoint)
                    first = await lines.next()
                except BaseException:
                    response.close()
                    raise
            try:
                line = first
                while line is not None:
                    yield wire.parse_watch_line(line)
                    line = await lines.next()
            finally:
                response.close()  # a watch's connection never goes back to the pool
        except _TRANSPORT_ERRORS as exc:
            raise _unreachable(exc) from exc


class _Lines:
    """The non-empty lines of a watch stream, each up to :data:`MAX_WATCH_LINE`."""

    def __init__(self, content: aiohttp.StreamReader, endpoint: Endpoint) -> None:
        self._content = content
        self._endpoint = endpoint
        self._buffer = bytearray()

    async def next(self) -> bytes | None:
        """The next line; None once the stream ended."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if line.strip():
                    return line
                continue
            if len(self._buffer) > MAX_WATCH_LINE:
                raise EtcdError(f"etcd at {self._endpoint} sent a watch line over 16 MiB")
            chunk = await self._content.readany()
            if not chunk:
                rest, self._buffer = bytes(self._buffer), bytearray()
                return rest if rest.strip() else None
            self._buffer += chunk


async def revoke_within(client: EtcdClient, lease: int, seconds: float) -> str | None:
    """``client.lease_revoke(lease)``, given up after ``seconds`` (a stop that etcd out
    of reach must not hold: the lease expires by itself). None once revoked, else why
    it was not."""
    try:
        async with asyncio.timeout(seconds):
            await client.lease_revoke(lease)
    except EtcdError as exc:
        return str(exc)
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    return None
