"""The admin API: JSON over HTTP under ``/api/``, on the broker's HTTP port.

:func:`add_api_routes` mounts it on the HTTP listener's application as a
sub-application, whose middleware answers every error under ``/api/`` as JSON
``{"error": code, "message": what to do}``: a bad address, selector,
parameter or body is 400, a missing login 401, a missing permission 403,
something unknown 404, a conflict with the broker's state (consumers, a
transaction, a limit) 409, a store that cannot make a change durable 503.
An exception of any other kind is a bug: it is logged once, with its
traceback, and answered 500. The paths, parameters and shapes are in
:mod:`chute.admin.openapi` (served at ``/api/openapi.json``) and docs/admin.md.

Each request is authenticated (:mod:`chute.admin.auth`) and then acts
through a core :class:`~chute.core.operations.connection.BrokerConnection` of its own, made
for the request and closed after it, so the core authorizes every operation
as it does a client's: the API needs the ``manage`` permission on each
address it touches (``manage = ["*"]`` for the broker-wide views), and the
core's rules on top (``delete`` to delete or purge). These short-lived
connections log nothing and are left out of the connections the API shows.
A change is answered once the store made it durable, as the native
protocol's confirmations are. Moves and dead-letter retries are the
exception: they start a job (:mod:`chute.admin.moves`) and answer at once,
and the job says when what it moved is durable.

The operations themselves are the core's (:mod:`chute.core.operations.manage` and the
connection's); a handler reads the request, calls one, and shapes the
answer. Rates come from :class:`~chute.admin.rates.RateSampler`.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from chute.admin.auth import ApiError, Gate, peer_of
from chute.admin.cluster import cluster_document, cluster_page, with_nodes
from chute.admin.messages import message_view
from chute.admin.moves import MoveJob, MoveJobs
from chute.admin.openapi import document
from chute.admin.params import (
    bool_field,
    fields,
    int_field,
    integer,
    json_body,
    query_bool,
    query_int,
    seqs_field,
    string_field,
)
from chute.admin.publish import published
from chute.admin.rates import RateSampler
from chute.core.model.address import canonical
from chute.core.model.queue import QueueChannel
from chute.core.operations import manage, transfer
from chute.core.operations.browse import BrowsePage
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.access import Action
from chute.core.rules.broker import Broker
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ChuteError,
    ClientIdInUse,
    ConsumerError,
    DestinationFull,
    NotFound,
    StoreError,
    TransactionError,
)
from chute.server.host import ServerHost
from chute.version import __version__

log = logging.getLogger("chute.admin")

Handler = Callable[[web.Request, BrokerConnection], Awaitable[web.StreamResponse]]

_CONFLICTS: Final = (ConsumerError, TransactionError, DestinationFull, ClientIdInUse)
_MANAGES_ALL: Final = 'needs the manage permission on every address (manage = ["*"])'


def add_api_routes(app: web.Application, server: ServerHost) -> None:
    """Mount the admin API (``/api/...``) and its OpenAPI document on ``app``."""
    api = AdminApi(server)
    sub = web.Application(middlewares=[api.errors])
    route = api.route
    sub.router.add_get("/openapi.json", api.openapi)
    sub.router.add_get("/overview", route(api.overview))
    sub.router.add_get("/cluster", route(api.cluster))
    sub.router.add_get("/destinations", route(api.destinations))
    sub.router.add_post("/destinations", route(api.create))
    sub.router.add_get("/destinations/{address}", route(api.destination))
    sub.router.add_delete("/destinations/{address}", route(api.delete))
    sub.router.add_post("/destinations/{address}/purge", route(api.purge))
    sub.router.add_get("/destinations/{address}/messages", route(api.messages))
    sub.router.add_delete("/destinations/{address}/messages/{seq}", route(api.delete_message))
    sub.router.add_post("/destinations/{address}/move", route(api.move))
    sub.router.add_post("/destinations/{address}/retry", route(api.retry))
    sub.router.add_post("/destinations/{address}/publish", route(api.publish))
    sub.router.add_post("/destinations/{address}/get", route(api.get))
    sub.router.add_get("/moves", route(api.moves))
    sub.router.add_get("/moves/{id}", route(api.move_job))
    sub.router.add_delete("/moves/{id}", route(api.cancel_move))
    sub.router.add_get("/connections", route(api.connections))
    sub.router.add_delete("/connections/{id}", route(api.close_connection))
    sub.router.add_get("/consumers", route(api.consumers))
    sub.router.add_get("/subscriptions", route(api.subscriptions))
    sub.router.add_get("/transactions", route(api.transactions))
    sub.router.add_post("/transactions/{xid:.+}/commit", route(api.commit))
    sub.router.add_post("/transactions/{xid:.+}/rollback", route(api.rollback))
    sub.router.add_get("/cursors", route(api.cursors))
    sub.on_startup.append(api.startup)
    sub.on_shutdown.append(api.shutdown)
    sub.on_cleanup.append(api.cleanup)
    app.add_subapp("/api", sub)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(data: Any) -> str:
    return json.dumps(data, allow_nan=False, separators=(",", ":"))


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    response = _json({"error": code, "message": message}, status)
    response.headers.update(headers or {})
    return response


class AdminApi:
    """The handlers, the error middleware and what they share. See the module docstring."""

    def __init__(self, server: ServerHost) -> None:
        self.server = server
        self.gate = Gate(server)
        self.rates = RateSampler(self._recovered)
        self._own: set[str] = set()  # ids of the core connections of requests and jobs under way
        self._document: dict[str, Any] | None = None
        self.jobs = MoveJobs(server, self._own, self._synced)

    @property
    def broker(self) -> Broker:
        """The core broker (the HTTP listener opens before it is made: the listener
        answers nothing under ``/api/`` until the broker is ready)."""
        return self.server.broker

    def _recovered(self) -> Broker | None:
        return self.server.broker if getattr(self.server, "ready", True) else None

    async def startup(self, _app: web.Application) -> None:
        self.rates.start()

    async def shutdown(self, _app: web.Application) -> None:
        await self.jobs.close()  # before the requests under way are waited for

    async def cleanup(self, _app: web.Application) -> None:
        await self.rates.stop()

    # -- the frame around every handler --------------------------------------------------

    @web.middleware
    async def errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Every answer under ``/api/`` that is not a success, as JSON."""
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message, exc.headers)
        except ChuteError as exc:
            return self._chute_error(exc)
        except web.HTTPException as exc:
            return self._http_error(request, exc)
        except Exception:  # a bug: said once, with its traceback, and answered as JSON
            log.exception("admin API: %s %s failed", request.method, request.path)
            return _error(
                500,
                "internal-error",
                "the broker failed to answer this request (a bug, logged with its "
                "traceback): please report it",
            )

    @staticmethod
    def _chute_error(exc: ChuteError) -> web.Response:
        reason = exc.reason
        if isinstance(exc, NotFound):
            return _error(404, "not-found", reason)
        if isinstance(exc, AccessDenied):
            return _error(403, "forbidden", f"{reason}: ask for a role with the manage permission")
        if isinstance(exc, AuthenticationFailed):
            return _error(401, "unauthorized", reason)
        if isinstance(exc, _CONFLICTS):
            return _error(409, exc.code, reason)
        if isinstance(exc, StoreError):
            return _error(503, "store-error", f"{reason}: try again once the disk is fixed")
        return _error(400, exc.code, reason)

    @staticmethod
    def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        if exc.status == 404:
            message = f"no such API path {request.path}: see /api/openapi.json"
            return _error(404, "not-found", message)
        if exc.status == 405:
            allowed = headers.get("Allow", "")
            message = f"{request.method} is not allowed on {request.path} (allowed: {allowed})"
            return _error(405, "method-not-allowed", message, headers)
        if exc.status == 413:
            return _error(413, "too-large", "the request body is over 1 MiB: send less at once")
        return _error(exc.status, "http-error", exc.reason)

    def route(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """``handler`` behind the gate, with a core connection for the request."""

        async def handle(request: web.Request) -> web.StreamResponse:
            self.gate.check_browser(request)
            principal = await self.gate.principal(request)
            conn = BrokerConnection(self.broker, principal, protocol="http", peer=peer_of(request))
            self._own.add(conn.id)
            try:
                return await handler(request, conn)
            finally:
                self._own.discard(conn.id)
                conn.close()

        return handle

    async def _synced(self) -> None:
        """Return once what the request changed is durable.

        Raises:
            StoreError: the store could not make it durable.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        server = self.server

        def settle(error: BaseException | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                reason = error.reason if isinstance(error, ChuteError) else str(error)
                done.set_exception(StoreError(f"not stored: {reason}"))

        def synced(error: BaseException | None) -> None:
            if threading.get_ident() == server.loop_thread:
                settle(error)
            else:
                loop.call_soon_threadsafe(settle, error)

        server.request_sync(synced)
        await done

    @staticmethod
    def _manages_all(conn: BrokerConnection, what: str) -> None:
        if not conn.principal.manages_all:
            raise ApiError(403, "forbidden", f"{what} {_MANAGES_ALL}: ask for such a role")

    @staticmethod
    def _manage(conn: BrokerConnection, address: str) -> str:
        """The canonical address, once ``conn`` may manage it."""
        target = canonical(address)
        if not conn.principal.manages_all:  # as chute.core.operations.manage decides
            conn.authorize(Action.MANAGE, target)
        return target

    def _existing(self, conn: BrokerConnection, address: str) -> str:
        target = self._manage(conn, address)
        if self.broker.find(target) is None:
            raise NotFound(f"{target} does not exist: see GET /api/destinations")
        return target

    # -- handlers --------------------------------------------------------------------------

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        if self._document is None:
            self._document = document()
        return _json(self._document)

    async def overview(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        self._manages_all(conn, "the overview")
        stats = conn.stats_page(limit=1)
        data_dir = str(self.server.config.storage.data_dir)
        try:
            free: int | None = shutil.disk_usage(data_dir).free
        except OSError:
            free = None
        peers = self.server.peers
        cluster = (
            {} if peers is None else {"cluster": {"name": peers.cluster_name, "node": peers.node}}
        )
        return _json(
            {
                **cluster,
                "version": __version__,
                "uptime_s": round(time.time() - self.server.started, 1),
                "ready": bool(getattr(self.server, "ready", True)),
                "connections": sum(1 for c in self.broker.connections if c not in self._own),
                "memory": stats["memory"],
                "disk": {
                    "free_bytes": free,
                    "free_limit": self.server.config.storage.disk_free_limit,
                    "low": self.broker.store.space_low(),
                },
                "destination_count": stats["destination_count"],
                "prepared": len(stats["prepared"]),
                "sockets": self.server.limits.stats(),
                "producers": stats["producers"],
                "blocked_connections": sum(1 for c in self.server.connections if c.blocked),
            }
        )

    async def destinations(
        self, request: web.Request, conn: BrokerConnection
    ) -> web.StreamResponse:
        query = request.query
        page = await cluster_page(
            self.server,
            conn,
            pattern=query.get("pattern") or None,
            after=query.get("after", ""),
            limit=query_int(query, "limit"),
            contains=query.get("contains", ""),
        )
        shown = []
        for dest in page["destinations"]:
            if not conn.principal.manages_all and not conn.principal.may(
                Action.MANAGE, dest["address"]
            ):
                continue
            dest["rates"] = self.rates.rates(dest["address"], dest)
            shown.append(dest)
        return _json({"destinations": shown, "next": page["next"]})

    async def create(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        body = await json_body(request, required=True)
        fields(body, ("address",))
        address = canonical(string_field(body, "address", required=True) or "")
        created = manage.create(conn, address)
        await self._synced()
        return _json({"address": address, "created": created}, 201 if created else 200)

    async def destination(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        address = request.match_info["address"]
        try:
            found: dict[str, Any] | None = manage.destination(conn, address)
        except NotFound:
            if self.server.peers is None:
                raise
            found = None  # another node may hold it
        dest = await with_nodes(self.server, canonical(address), found)
        dest["rates"] = self.rates.rates(dest["address"], dest)
        return _json(dest)

    async def cluster(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        self._manages_all(conn, "the cluster")
        return _json(await cluster_document(self.server))

    async def delete(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        force = query_bool(request.query, "force")
        target = self._manage(conn, request.match_info["address"])
        deleted = conn.delete(target, force=force)
        await self._synced()
        return _json({"deleted": deleted})

    async def purge(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        target = self._manage(conn, request.match_info["address"])
        purged = conn.purge(target)
        await self._synced()
        return _json({"purged": purged})

    async def messages(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        query = request.query
        after = query_int(query, "after")
        before = query_int(query, "before")
        limit = query_int(query, "limit")
        selector = query.get("selector") or None
        target = self._existing(conn, request.match_info["address"])
        steps = conn.browse_steps(
            target, after=after, before=before, selector=selector, max_messages=limit
        )
        while True:  # a step at a time: other clients are served between them
            try:
                next(steps)
            except StopIteration as stop:
                page: BrowsePage = stop.value
                break
            await asyncio.sleep(0)
        return _json(
            {
                "messages": [message_view(e) for e in page.entries],
                "after": page.after,
                "before": page.before,
                "done": page.done,
            }
        )

    async def delete_message(
        self, request: web.Request, conn: BrokerConnection
    ) -> web.StreamResponse:
        seq = integer(request.match_info["seq"], "the sequence number")
        transfer.delete_message(conn, request.match_info["address"], seq)
        await self._synced()
        return _json({"deleted": 1})

    async def move(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        body = await json_body(request, required=True)
        fields(body, ("to", "selector", "seqs", "limit"))
        source = canonical(request.match_info["address"])
        target = string_field(body, "to", required=True) or ""
        selector = string_field(body, "selector") or None
        limit = int_field(body, "limit")
        seqs = seqs_field(body)
        job = MoveJob(self.jobs.next_id(), "move", source, target, selector, limit, self._job(conn))
        steps = transfer.move_steps(
            job.conn, source, target, selector=selector, seqs=seqs, limit=limit, tally=job.tally
        )
        return self._started(self.jobs.start(job, steps))

    async def retry(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        body = await json_body(request, required=False)
        fields(body, ("selector", "seqs", "limit"))
        source = canonical(request.match_info["address"])
        selector = string_field(body, "selector") or None
        limit = int_field(body, "limit")
        seqs = seqs_field(body)
        job = MoveJob(self.jobs.next_id(), "retry", source, None, selector, limit, self._job(conn))
        steps = transfer.retry_steps(
            job.conn, source, selector=selector, seqs=seqs, limit=limit, tally=job.tally
        )
        return self._started(self.jobs.start(job, steps))

    def _job(self, conn: BrokerConnection) -> BrokerConnection:
        """A core connection for a job, which outlives its request: as ``conn``. Made
        once the request is read whole: :meth:`MoveJobs.start` closes it."""
        return BrokerConnection(self.broker, conn.principal, protocol="http", peer=conn.peer)

    def _started(self, job: MoveJob) -> web.Response:
        response = _json(self._view(job), 202)
        response.headers["Location"] = f"/api/moves/{job.id}"
        return response

    def _view(self, job: MoveJob) -> dict[str, Any]:
        found = self.broker.find(job.source)
        return job.view(found if isinstance(found, QueueChannel) else None)

    def _visible(self, conn: BrokerConnection, job: MoveJob) -> bool:
        """Whether ``conn`` may see ``job``: it may manage its source."""
        return conn.principal.manages_all or conn.principal.may(Action.MANAGE, job.source)

    async def moves(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        shown = [self._view(j) for j in self.jobs.jobs() if self._visible(conn, j)]
        return _json({"moves": shown})

    async def move_job(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        return _json(self._view(self._visible_job(request, conn)))

    async def cancel_move(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        job = self._visible_job(request, conn)
        await self.jobs.cancel(job, f"cancelled by {conn.principal}")
        await self._synced()
        return _json(self._view(job))

    def _visible_job(self, request: web.Request, conn: BrokerConnection) -> MoveJob:
        job = self.jobs.find(request.match_info["id"])
        if not self._visible(conn, job):
            self._manage(conn, job.source)  # raises AccessDenied, said as the others are
        return job

    async def publish(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        body = await json_body(request, required=True)
        target = self._existing(conn, request.match_info["address"])
        message, ttl = published(body)
        conn.session().send(target, message, ttl=ttl)
        await self._synced()
        return _json({"published": True, "id": message.id})

    async def get(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        body = await json_body(request, required=False)
        fields(body, ("count", "requeue"))
        count = int_field(body, "count") if "count" in body else 1
        if not 1 <= count <= manage.MAX_TAKE:
            raise ApiError(
                400, "bad-request", f"the field count must be from 1 to {manage.MAX_TAKE}"
            )
        requeue = bool_field(body, "requeue")
        entries = manage.take(conn, request.match_info["address"], count, requeue=requeue)
        await self._synced()
        return _json({"messages": [message_view(e) for e in entries], "requeued": requeue})

    async def connections(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        listed = [c for c in manage.connections(conn) if c.get("id") not in self._own]
        return _json({"connections": listed})

    async def close_connection(
        self, request: web.Request, conn: BrokerConnection
    ) -> web.StreamResponse:
        connection_id = request.match_info["id"]
        if connection_id in self._own:  # an API request's own: not a client's
            raise NotFound(f"no connection {connection_id}: see GET /api/connections")
        manage.close_connection(conn, connection_id)
        return web.Response(status=204)

    async def consumers(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        address = request.query.get("address") or None
        return _json({"consumers": manage.consumers(conn, address)})

    async def subscriptions(
        self, request: web.Request, conn: BrokerConnection
    ) -> web.StreamResponse:
        return _json({"subscriptions": manage.subscriptions(conn)})

    async def cursors(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        return _json({"cursors": manage.cursors(conn)})

    async def transactions(
        self, request: web.Request, conn: BrokerConnection
    ) -> web.StreamResponse:
        self._manages_all(conn, "prepared transactions")
        return _json({"prepared": conn.prepared()})

    async def commit(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        self._manages_all(conn, "settling prepared transactions")
        conn.commit_prepared(request.match_info["xid"])
        await self._synced()
        return web.Response(status=204)

    async def rollback(self, request: web.Request, conn: BrokerConnection) -> web.StreamResponse:
        self._manages_all(conn, "settling prepared transactions")
        conn.rollback_prepared(request.match_info["xid"])
        await self._synced()
        return web.Response(status=204)
