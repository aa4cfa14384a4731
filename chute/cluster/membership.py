"""Cluster membership: which nodes are up, agreed in etcd.

A node registers ``/<cluster>/nodes/<node>`` with a JSON description of itself
(``{"name", "address", "started", "version", "pid"}``) under a lease it keeps alive;
a node that dies stops keeping it alive, and etcd deletes the key when the lease's
TTL runs out, so a dead node leaves the member set within ``ttl`` seconds. The key is
created by a transaction that succeeds only if it is absent, so two live processes
never hold one node name: the second is refused with :class:`NodeNameTaken`.

Every node reads the ``nodes/`` prefix and then watches it from the revision after
that read, so it sees every join and leave in order, and logs each once.

**Losing etcd.** When a keep-alive cannot reach etcd the node goes on with the member
set it last knew, is marked :attr:`NodeState.UNREACHABLE` (logged once), and keeps
trying with backoff. When etcd answers again: if the lease is still alive nothing
changed; if it expired meanwhile (and etcd deleted the key), the node registers again
under a new lease, unless another process took the name in between, which is logged
and leaves the node :attr:`NodeState.REFUSED` (it still serves, but is no member).
A node registered under a live's lease (:mod:`chute.ha`) registers again under the
lease the live took anew, once it has one (``lease``, a :data:`LeaseSource`). The
watch resumes from the last revision it applied, so no leave or join that
happened meanwhile is missed.

States::

    STARTING --start()--> REGISTERED <--etcd back--> UNREACHABLE
                              |                          |
                              +--lease expired, name taken by another--> REFUSED
    any --stop()--> STOPPED

A :class:`Membership` belongs to one event loop and is driven by its own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from chute.cluster.errors import EtcdError, LeaseNotFound, NodeNameTaken
from chute.cluster.etcd import Backoff, EtcdClient, Snapshot, WatchItem, revoke_within
from chute.cluster.etcd_wire import EventType, KeyValue, Lease
from chute.cluster.url import Endpoint, check_name
from chute.version import __version__

log = logging.getLogger("chute.cluster")

DEFAULT_TTL: Final = 10
LEAVE_S: Final = 2.0
"""How long a stopping node tries to revoke its lease: etcd out of reach must not hold a
clean stop (the lease expires by itself within its TTL)."""
"""Seconds a node's lease lives without a keep-alive: how long a dead node stays listed."""


class NodeState(enum.Enum):
    STARTING = "starting"
    REGISTERED = "registered"
    UNREACHABLE = "coordinator unreachable"
    REFUSED = "refused"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Member:
    """A node as it registered itself; ``revision`` is its key's create revision."""

    name: str
    address: str
    started: float
    version: str
    revision: int

    @classmethod
    def from_kv(cls, name: str, kv: KeyValue) -> Member:
        try:
            info = json.loads(kv.value)
            if not isinstance(info, dict):
                raise TypeError("not an object")
            return cls(
                name=name,
                address=str(info.get("address", "")),
                started=float(info.get("started", 0.0)),
                version=str(info.get("version", "")),
                revision=kv.create_revision,
            )
        except (ValueError, TypeError):
            log.warning("cluster: node %s registered an unreadable description", name)
            return cls(name=name, address="", started=0.0, version="", revision=kv.create_revision)


class EventKind(enum.Enum):
    JOIN = "join"
    LEAVE = "leave"


@dataclass(frozen=True, slots=True)
class MembershipEvent:
    kind: EventKind
    member: Member


Listener = Callable[[MembershipEvent], None]

LeaseSource = Callable[[int], Awaitable[int]]
"""Where a node registers under a lease it does not own (a live's, :mod:`chute.ha`):
given the lease etcd no longer knows (0 at first), the owner's current lease, once it
has one."""


class Membership:
    """This node's place in the cluster and its view of the others (module docstring)."""

    def __init__(
        self,
        client: EtcdClient,
        cluster: str,
        node: str,
        *,
        address: str,
        ttl: int = DEFAULT_TTL,
        backoff: Backoff | None = None,
        lease: LeaseSource | None = None,
    ) -> None:
        self.client = client
        self.cluster = check_name(cluster)
        self.node = check_name(node, "node name")
        self.address = address
        self.ttl = ttl
        self._prefix = f"/{cluster}/nodes/".encode()
        self._key = self._prefix + node.encode()
        self._backoff = backoff or Backoff(0.1, max(0.2, ttl / 3))
        self._started = time.time()
        self._state = NodeState.STARTING
        self._members: dict[str, Member] = {}
        self._revision = 0
        self._lease = 0
        self._given_lease = lease  # register under its lease (a live's, chute.ha), not revoke it
        self._listeners: list[Listener] = []
        self._changed = asyncio.Event()
        self._keepalive_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._watching: Endpoint | None = None  # where the watch is set up

    # -- what the node sees ------------------------------------------------------------

    @property
    def state(self) -> NodeState:
        return self._state

    @property
    def members(self) -> Mapping[str, Member]:
        """The member set as last known (kept as it was while etcd is unreachable)."""
        return dict(self._members)

    @property
    def lease(self) -> int:
        return self._lease

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` on every join and leave (on the event loop, synchronously)."""
        self._listeners.append(listener)

    async def wait_for(self, predicate: Callable[[Membership], bool]) -> None:
        """Return once ``predicate(self)`` holds (bound it with ``asyncio.timeout``)."""
        while not predicate(self):
            await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _set_state(self, state: NodeState) -> None:
        if state is not self._state:
            self._state = state
            self._notify()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Register this node and start following the others.

        Raises :class:`NodeNameTaken` when a live process holds the name, and
        :class:`EtcdUnavailable` / :class:`EtcdAuthError` when etcd cannot be used: a
        node refuses to start rather than run outside its cluster."""
        await self._register()
        try:
            listing = await self.client.get_prefix(self._prefix)
        except EtcdError:
            with contextlib.suppress(EtcdError):
                await self.client.lease_revoke(self._lease)
            raise
        self._replace(listing.kvs)
        self._revision = listing.revision
        self._set_state(NodeState.REGISTERED)
        log.info(
            "cluster %s: registered as node %s (%s), %d node(s) up: %s",
            self.cluster,
            self.node,
            self.address,
            len(self._members),
            ", ".join(sorted(self._members)),
        )
        self._keepalive_task = asyncio.create_task(self._keep_alive(), name="cluster-keepalive")
        self._keepalive_task.add_done_callback(self._ended)
        self._start_watch()

    async def stop(self, *, revoke: bool = True) -> None:
        """Stop following the cluster; with ``revoke`` leave it at once (the key goes
        with the lease) rather than when the lease expires."""
        tasks = [t for t in (self._keepalive_task, self._watch_task) if t is not None]
        for task in tasks:
            task.cancel()
        # their CancelledErrors are collected; one that cancels stop() itself goes on
        await asyncio.gather(*tasks, return_exceptions=True)
        self._keepalive_task = self._watch_task = None
        if (
            revoke
            and self._lease
            and self._given_lease is None
            and self._state is not NodeState.REFUSED
        ):
            failed = await revoke_within(self.client, self._lease, LEAVE_S)
            if failed is not None:
                log.warning(
                    "cluster %s: could not leave cleanly (%s); the lease expires by itself",
                    self.cluster,
                    failed,
                )
        self._set_state(NodeState.STOPPED)

    # -- registration ------------------------------------------------------------------

    def _description(self) -> bytes:
        return json.dumps(
            {
                "name": self.node,
                "address": self.address,
                "started": self._started,
                "version": __version__,
                "pid": os.getpid(),
            },
            separators=(",", ":"),
        ).encode()

    async def _register(self) -> None:
        lease = (
            Lease(await self._given_lease(self._lease), self.ttl)
            if self._given_lease is not None
            else await self.client.lease_grant(self.ttl)
        )
        result = await self.client.create_if_absent(self._key, self._description(), lease=lease.id)
        if not result.succeeded:
            holder = result.kvs[0] if result.kvs else None
            # A create retried on another endpoint after the first one applied it finds
            # its own key: that is a success.
            if holder is None or holder.lease != lease.id:
                if self._given_lease is None:
                    with contextlib.suppress(EtcdError):
                        await self.client.lease_revoke(lease.id)
                where = Member.from_kv(self.node, holder).address if holder else "?"
                raise NodeNameTaken(
                    f"node name {self.node!r} is taken in cluster {self.cluster!r} "
                    f"(by the node at {where}); start this node with another name, or, if "
                    f"that process is dead, wait up to {self.ttl} s for its lease to expire"
                )
        self._lease = lease.id

    # -- keep-alive and the coordinator's loss -----------------------------------------

    async def _keep_alive(self) -> None:
        interval = max(self.ttl / 3, 0.1)
        while True:
            await asyncio.sleep(
                interval if self._state is NodeState.REGISTERED else self._backoff.next_delay()
            )
            try:
                await self.client.lease_keepalive(self._lease)
            except LeaseNotFound:
                if not await self._register_again():
                    return
            except EtcdError as exc:  # unreachable, or refusing us (auth): the same here
                if self._state is not NodeState.UNREACHABLE:
                    log.warning(
                        "cluster %s: coordinator unreachable (%s); node %s keeps serving with "
                        "the %d node(s) it knows and retries",
                        self.cluster,
                        exc,
                        self.node,
                        len(self._members),
                    )
                    self._set_state(NodeState.UNREACHABLE)
                continue
            if self._state is NodeState.UNREACHABLE:
                log.warning("cluster %s: coordinator reachable again", self.cluster)
                self._recovered()
            elif self._watching not in (None, self.client.endpoint):
                # requests fail over to another member while the watch's member went
                # quiet (it may be gone without a word): watch through the live one
                self._start_watch()

    async def _register_again(self) -> bool:
        """After the lease expired: register under a new lease. False (and REFUSED) if
        another process took the name meanwhile."""
        log.warning(
            "cluster %s: node %s's lease expired (etcd was out of reach for over %d s); "
            "registering again",
            self.cluster,
            self.node,
            self.ttl,
        )
        try:
            await self._register()
        except NodeNameTaken as exc:
            log.error("cluster %s: %s; this node is no longer a member", self.cluster, exc)
            self._lease = 0
            self._set_state(NodeState.REFUSED)
            return False
        except EtcdError as exc:
            log.warning("cluster %s: registering again failed (%s); retrying", self.cluster, exc)
            self._set_state(NodeState.UNREACHABLE)
            return True  # keep trying: the next keep-alive finds the new lease or none
        log.warning("cluster %s: node %s registered again", self.cluster, self.node)
        self._recovered()
        return True

    def _recovered(self) -> None:
        self._backoff.reset()
        self._set_state(NodeState.REGISTERED)
        # the old watch's connection may be half-open (an etcd that was stopped):
        # watch anew from the revision after the last one applied
        self._start_watch()

    # -- following the others ----------------------------------------------------------

    def _start_watch(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
        self._watching = None
        self._watch_task = asyncio.create_task(self._watch(), name="cluster-watch")
        self._watch_task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A task that failed is a bug: say so (the node goes on serving)."""
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error(
                "cluster %s: %s stopped on an error", self.cluster, task.get_name(), exc_info=error
            )

    def _watching_at(self, endpoint: Endpoint) -> None:
        self._watching = endpoint

    async def _watch(self) -> None:
        retry = Backoff(self._backoff.initial, self._backoff.maximum)
        while True:
            try:
                async for item in self.client.watch(
                    self._prefix, self._revision + 1, backoff=retry, on_watching=self._watching_at
                ):
                    self._apply(item)
            except EtcdError as exc:  # etcd cancelled the watch, or refused us
                log.warning(
                    "cluster %s: watching the nodes failed (%s); watching again", self.cluster, exc
                )
                await retry.sleep()

    def _apply(self, item: WatchItem) -> None:
        if isinstance(item, Snapshot):
            self._replace(item.kvs)
            self._revision = item.revision
            return
        name = item.kv.key[len(self._prefix) :].decode("utf-8", "replace")
        if item.type is EventType.PUT:
            self._join(Member.from_kv(name, item.kv))
        else:
            self._leave(name)
        self._revision = item.kv.mod_revision

    def _replace(self, kvs: tuple[KeyValue, ...]) -> None:
        seen = {
            kv.key[len(self._prefix) :].decode("utf-8", "replace"): kv
            for kv in kvs
            if kv.key.startswith(self._prefix)
        }
        for name in [name for name in self._members if name not in seen]:
            self._leave(name)
        for name, kv in seen.items():
            self._join(Member.from_kv(name, kv))

    def _join(self, member: Member) -> None:
        known = self._members.get(member.name)
        self._members[member.name] = member
        if known is not None and known.revision == member.revision:
            return  # the same registration, updated
        if known is not None:
            self._emit(MembershipEvent(EventKind.LEAVE, known))
        if member.name != self.node and self._state is not NodeState.STARTING:
            log.info("cluster %s: node %s joined (%s)", self.cluster, member.name, member.address)
        self._emit(MembershipEvent(EventKind.JOIN, member))

    def _leave(self, name: str) -> None:
        member = self._members.pop(name, None)
        if member is None:
            return
        if name != self.node:
            log.info("cluster %s: node %s left (%s)", self.cluster, name, member.address)
        self._emit(MembershipEvent(EventKind.LEAVE, member))

    def _emit(self, event: MembershipEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("cluster %s: a membership listener failed", self.cluster)
        self._notify()
