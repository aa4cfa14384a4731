"""The broker process: its event loop and garbage collector, run until a signal stops it.

:func:`run` is what ``chute serve`` calls: it makes the loop (uvloop when installed),
tunes the garbage collector for a broker's many long-lived objects, raises the open
file limit to the connections allowed, runs a :class:`~chute.server.app.BrokerServer`
until SIGTERM or SIGINT, and ends the tasks still pending before the loop closes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING, Any

from chute.config import ServerConfig
from chute.errors import ChuteError
from chute.ha.view import wanted as ha_wanted
from chute.server.app import BrokerServer
from chute.server.listener import raise_open_file_limit
from chute.server.stomp import stomp_refusal
from chute.server.supervisor import watch_lifeline

if TYPE_CHECKING:
    from chute.server.app import MakeSite

log = logging.getLogger("chute.ha")

TASKS_END_S = 5.0  # stopping: how long the tasks still pending get to end once cancelled


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when it is installed (it is a dependency where it builds), else asyncio's."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a broker.

    A broker holds millions of long-lived, acyclic objects (messages and their
    queue entries) and allocates a few per message. With CPython's defaults a
    young collection runs every 700 allocations and older ones walk every
    object held, so a deep queue makes each message dearer. Queued messages
    never form cycles, so collect rarely and leave start-up objects out.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def run(
    config: ServerConfig,
    *,
    ready: Any = None,
    site: MakeSite | None = None,
    lifeline: int | None = None,
) -> None:
    """Run a broker until SIGTERM/SIGINT. ``ready(bound)`` is called once it listens;
    ``site`` is what the HTTP port serves (needed while ``http_port`` is on). A node of
    ``chute serve --nodes`` also stops once the pipe ``lifeline`` from its parent ends
    (:mod:`chute.server.supervisor`)."""
    tune_gc()
    raise_open_file_limit(config.limits.max_connections)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)

    async def main() -> None:
        server = BrokerServer(config, site=site)
        if ha_wanted(config):  # a backup until this process is the node's live
            from chute.ha.role import become_live  # noqa: PLC0415 - etcd's client: aiohttp

            refusals = (
                [(config.listen.stomp_port, stomp_refusal)] if config.listen.stomp_port else []
            )
            server.ha = await become_live(config, lambda why: _step_down(server, why), refusals)
        try:
            bound = await server.start()
        except BaseException:
            if server.store is not None:
                server.store.close()
            if server.ha is not None:
                await server.ha.close()
            raise
        server.handle_signals()
        if lifeline is not None:
            watch_lifeline(loop, lifeline, server.request_stop)
        if ready is not None:
            ready(bound)
        await server.serve_until_stopped()
        if server.ha is not None:
            await server.ha.close()
            if server.ha.deposed is not None:
                raise ChuteError(f"no longer the live process of this node: {server.ha.deposed}")

    try:
        loop.run_until_complete(main())
    finally:
        try:
            end_remaining_tasks(loop)
        finally:
            loop.close()


def _step_down(server: BrokerServer, why: str) -> None:
    """The live lost its lease: it confirms nothing more (its gate says so) and stops."""
    log.error(
        "high availability: no longer live (%s): confirming nothing more and stopping; "
        "started again, this process rejoins as a backup",
        why,
    )
    if server.ha is not None:
        server.ha.deposed = why
    server.request_stop()


def end_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending once the broker stopped (or failed to start) and let
    them finish, as ``asyncio.run`` does: a task the loop never ran again is destroyed
    pending with the loop ("Task was destroyed but it is pending!")."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=TASKS_END_S))
    loop.run_until_complete(loop.shutdown_asyncgens())
