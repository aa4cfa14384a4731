"""Move jobs: the admin API's moves and dead-letter retries, run beside everyone else.

Theory of operation
-------------------
``POST /api/destinations/{address}/move`` (or ``/retry``) makes a :class:`MoveJob`
and answers at once with it; the job then moves the messages on the broker's loop
while the client polls ``GET /api/moves/{id}`` for its progress, and
``DELETE /api/moves/{id}`` cancels it. The work is the core's
(:func:`chute.core.operations.transfer.move_steps`,
:func:`~chute.core.operations.transfer.retry_steps`):
a generator of steps, each moving at most :data:`chute.core.operations.transfer.STEP`
messages in one atomic store commit. The request takes the first step itself, so
a bad address, selector or permission is answered as an error there, not left
in a failed job.

A job takes its steps in **turns** (:meth:`MoveJobs._run`), as a native connection
acts on its input (:mod:`chute.server.turns`): a turn ends after :data:`TURN_S`,
or as soon as another client waits for an answer; the loop then serves everyone
else. When the loop had other work meanwhile, the job holds back until it took
no more than :data:`SHARE` of the loop's time; when nobody else wants the loop,
it goes on at once. After each turn it asks the store's writer thread to write
what it moved, and it waits while the writer has more than :data:`BACKLOG` to
write (otherwise the records piled up for the next sync, which a producer's
send may run on the loop, and held every client for as long as they took to
write), and while the store's own work would make its reads wait
(``Store.reading_waits``: the journal's reclaim pass, which the move's freed
segments bring, holds its index for the whole pass). So a move of a deep queue
runs at full speed on an idle broker, and on a busy one it cannot starve the
other clients.

A job ends ``done`` (once what it moved is durable), ``cancelled`` (a DELETE,
or the broker stopping: :meth:`MoveJobs.close`), or ``failed`` (the target
refused: full, or an origin not granted; the error says how many had moved).
It is cancelled only between steps, where no message is withdrawn: each
message is then either in the source or in the target, never both, never
neither (each step's adds and acks are one commit, see
:mod:`chute.core.operations.transfer`). One job at a time per source queue; the last
:data:`KEPT` finished jobs stay listed.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final

from chute.admin.auth import ApiError
from chute.core.model.queue import QueueChannel
from chute.core.operations import transfer
from chute.core.operations.connection import BrokerConnection
from chute.errors import ChuteError, NotFound
from chute.server.host import ServerHost

log = logging.getLogger("chute.admin")

TURN_S: Final = 0.002
"""The longest a job acts before the others get the loop (seconds): a step or more."""
SHARE: Final = 0.1
"""The most of the loop's time a job takes while other work waits for the loop."""
IDLE_S: Final = 0.0005
"""Other work shorter than this between two turns means nobody else wants the loop
(seconds): the job goes on at once."""
BACKLOG: Final = 1 << 20
"""Bytes the store's writer may have yet to write before a job waits for it (what a
job moved is written by the writer's thread: a sync on the loop, or admission's
"writer behind" line, must not meet a pile of it)."""
WAIT_S: Final = 0.002
"""How long a job waits for the writer before it looks again (seconds)."""
SYNCS_OFF_LOOP_S: Final = 1.0
"""After each of a job's turns, for this long no sync runs on the broker's loop (they go
to the writer's thread, joining the job's writes): a producer's sync on the loop would
wait for the disk the job keeps busy, and hold every client meanwhile."""
KEPT: Final = 32
"""Finished jobs kept for ``GET /api/moves``."""

Steps = Generator[None, None, Any]


def _written(error: BaseException | None) -> None:
    """A job's records are durable (or not: the job's end asks the store again, and says
    so)."""


class JobState(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class MoveJob:
    """One move or retry: what it was asked, how far it got, how it ended."""

    def __init__(  # noqa: PLR0917 - what the request asked
        self,
        job_id: int,
        kind: str,
        source: str,
        target: str | None,
        selector: str | None,
        limit: int,
        conn: BrokerConnection,
    ) -> None:
        self.id = job_id
        self.kind = kind  # "move" or "retry"
        self.source = source
        self.target = target  # a move's; a retry's targets are the dead letters' origins
        self.selector = selector
        self.limit = limit
        self.conn = conn  # acts for the principal who asked, until the job ends
        self.tally: Counter[str] = Counter()  # moved so far, by target
        self.state = JobState.RUNNING
        self.error: ChuteError | None = None
        self.why = ""  # why it was cancelled
        self.started = time.time()
        self.ended: float | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def moved(self) -> int:
        return sum(n for to, n in self.tally.items() if to != transfer.UNKNOWN_ORIGIN)

    def view(self, queue: QueueChannel | None) -> dict[str, Any]:
        """The job as the API shows it; ``queue``: its source, if it still exists."""
        moved = self.moved
        took = (self.ended or time.time()) - self.started
        view: dict[str, Any] = {
            "id": str(self.id),
            "kind": self.kind,
            "from": self.source,
            "to": self.target,
            "selector": self.selector,
            "limit": self.limit,
            "state": self.state.value,
            "moved": moved,
            "remaining": None if queue is None else queue.ready + queue.paged,
            "in_flight": None if queue is None else queue.inflight,
            "started": round(self.started, 3),
            "ended": None if self.ended is None else round(self.ended, 3),
            "rate": round(moved / took, 1) if took > 0 else 0.0,
            "error": None,
        }
        if self.kind == "retry":
            view["to"] = {to: n for to, n in sorted(self.tally.items()) if to}
            view["left"] = self.tally[transfer.UNKNOWN_ORIGIN]
        if self.error is not None:
            view["error"] = {"error": self.error.code, "message": self.error.reason}
        elif self.state is JobState.CANCELLED:
            view["error"] = {"error": "cancelled", "message": self.why}
        return view


class MoveJobs:
    """The admin API's move jobs (see the module docstring). ``own``: the ids of the
    API's own core connections, which the API leaves out of the connections it lists;
    ``synced``: returns once what was changed is durable."""

    def __init__(
        self, server: ServerHost, own: set[str], synced: Callable[[], Awaitable[None]]
    ) -> None:
        self.server = server
        self._own = own
        self._synced = synced
        self._ids = itertools.count(1)
        self._running: dict[int, MoveJob] = {}
        self._finished: deque[MoveJob] = deque(maxlen=KEPT)
        self._closed = False

    def start(self, job: MoveJob, steps: Steps) -> MoveJob:
        """Take the job's first step here (a bad request raises its error, and the
        job is not kept), then the rest in turns.

        Raises:
            ChuteError: what the core refused. ApiError: 409, a job moves from the same
                source already; 503, the broker is stopping.
        """
        if self._closed:
            job.conn.close()
            raise ApiError(503, "stopping", "the broker is stopping: it starts no more moves")
        for other in self._running.values():
            if other.source == job.source:
                job.conn.close()
                raise ApiError(
                    409,
                    "move-running",
                    f"move job {other.id} moves messages of {job.source} now: wait for it "
                    f"to end, or cancel it (DELETE /api/moves/{other.id})",
                )
        self._own.add(job.conn.id)
        try:
            next(steps)
        except StopIteration:
            self._running[job.id] = job
            job.task = asyncio.ensure_future(self._finish(job))
            return job
        except BaseException:
            self._own.discard(job.conn.id)
            job.conn.close()
            raise
        self._running[job.id] = job
        job.task = asyncio.ensure_future(self._run(job, steps))
        return job

    def next_id(self) -> int:
        return next(self._ids)

    def find(self, job_id: str) -> MoveJob:
        """Raises NotFound: no such job (or it finished long ago)."""
        for job in self.jobs():
            if str(job.id) == job_id:
                return job
        raise NotFound(f"no move job {job_id}: see GET /api/moves")

    def jobs(self) -> list[MoveJob]:
        """Running jobs and the last finished ones, newest first."""
        return sorted([*self._running.values(), *self._finished], key=lambda j: -j.id)

    async def cancel(self, job: MoveJob, why: str) -> None:
        """Stop ``job`` after the step it is in (nothing if it ended already)."""
        task = job.task
        if task is None or task.done():
            return
        job.why = why
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def close(self) -> None:
        """The broker is stopping: cancel every running job, now."""
        self._closed = True
        for job in list(self._running.values()):
            await self.cancel(job, "the broker is stopping")

    async def _run(self, job: MoveJob, steps: Steps) -> None:
        contenders = self.server.contenders
        store = self.server.broker.store
        clock = time.perf_counter
        try:
            while True:
                if store.backlog() > BACKLOG or store.reading_waits():
                    await asyncio.sleep(WAIT_S)  # the writer's work first: it holds the store
                    continue
                # the job keeps the disk busy: a producer's sync is not to wait on the loop
                store.syncs_off_loop(SYNCS_OFF_LOOP_S)
                began = clock()
                end = began + TURN_S
                while True:
                    try:
                        next(steps)
                    except StopIteration:
                        await self._finish(job)
                        return
                    if clock() >= end or contenders.waiting(-1) or store.reading_waits():
                        break
                store.sync(_written)  # written and synced on the writer's thread, off the loop
                used = clock() - began
                yielded = clock()
                await asyncio.sleep(0)  # everyone else waiting for the loop gets it
                others = clock() - yielded
                if others > IDLE_S:  # the loop is busy: keep to our share of it
                    rest = used * (1 - SHARE) / SHARE - others
                    if rest > 0:
                        await asyncio.sleep(rest)
        except asyncio.CancelledError:
            steps.close()  # between steps: nothing is withdrawn
            self._end(job, JobState.CANCELLED)
            raise
        except ChuteError as exc:
            job.error = exc
            self._end(job, JobState.FAILED)
        except Exception as exc:  # a bug: said once, with its traceback
            log.exception("admin: move job %d failed", job.id)
            job.error = ChuteError(f"the move failed (a bug, logged): {exc}")
            self._end(job, JobState.FAILED)

    async def _finish(self, job: MoveJob) -> None:
        """The steps are done: the job is, once what it moved is durable."""
        try:
            await self._synced()
        except ChuteError as exc:
            job.error = exc
            self._end(job, JobState.FAILED)
            return
        except asyncio.CancelledError:
            self._end(job, JobState.CANCELLED)
            raise
        self._end(job, JobState.DONE)

    def _end(self, job: MoveJob, state: JobState) -> None:
        if job.state is not JobState.RUNNING:
            return
        job.state = state
        job.ended = time.time()
        self._running.pop(job.id, None)
        self._finished.append(job)
        self._own.discard(job.conn.id)
        job.conn.close()
        if state is JobState.CANCELLED:
            log.info(
                "%s: move job %d (%s of %s) cancelled after %d messages: %s",
                job.conn.principal,
                job.id,
                job.kind,
                job.source,
                job.moved,
                job.why,
            )
