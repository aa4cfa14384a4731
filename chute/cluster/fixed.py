"""A fixed membership, no coordinator: the nodes ``chute serve --nodes N`` starts on one machine.

The parent process (:mod:`chute.server.supervisor`) decides every node's name and
own native address before any node starts, and hands each node a
:class:`FixedNodes`: its own name, every member's address, the cluster's name and,
when users are configured, the credentials its links log in with. A node's
:class:`FixedMembership` then emits, at start, the same join events
:class:`~chute.cluster.membership.Membership` emits for what it reads from etcd, and
nothing after: a node of a fixed cluster never leaves it. A node that is down is a
link that reconnects; what is in doubt with it waits for it to come back, which its
supervisor makes soon (it restarts a node that dies).

A :class:`FixedNodes` travels from the parent to a node as one JSON line
(:meth:`FixedNodes.to_json`, :meth:`FixedNodes.from_json`) over an inherited pipe,
never through a file or the command line, since it may hold a secret.

States: ``STARTING --start()--> REGISTERED --stop()--> STOPPED``. A
:class:`FixedMembership` belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from chute.cluster.membership import EventKind, Listener, Member, MembershipEvent, NodeState
from chute.cluster.url import check_name
from chute.errors import ConfigError
from chute.version import __version__

FIXED_CLUSTER: Final = "local"
"""The name of the cluster ``chute serve --nodes`` makes (links check it)."""


@dataclass(frozen=True, slots=True)
class FixedNodes:
    """What a node of a fixed cluster is told by the process that started it.

    ``members`` maps every node's name (this one's too) to the native address
    (``HOST:PORT``) the others dial it at; ``port`` is this node's own native port
    (its port in ``members``), ``user`` and ``password`` the credentials its links
    log in with ("" when the broker has no users)."""

    node: str
    members: Mapping[str, str]
    cluster: str = FIXED_CLUSTER
    user: str = ""
    password: str = field(default="", repr=False)
    password_hash: str = field(default="", repr=False)
    """The hash of ``password`` for the per-run link user (empty: a configured user)."""

    @property
    def port(self) -> int:
        """This node's own native port."""
        return int(self.members[self.node].rpartition(":")[2])

    def to_json(self) -> str:
        return json.dumps(
            {
                "node": self.node,
                "members": dict(self.members),
                "cluster": self.cluster,
                "user": self.user,
                "password": self.password,
                "password_hash": self.password_hash,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> FixedNodes:
        """Raises ConfigError: not the description of a node of a fixed cluster."""
        try:
            data = json.loads(text)
            members = {str(k): str(v) for k, v in data["members"].items()}
            nodes = cls(
                node=check_name(str(data["node"]), "node name"),
                members=members,
                cluster=check_name(str(data["cluster"])),
                user=str(data.get("user", "")),
                password=str(data.get("password", "")),
                password_hash=str(data.get("password_hash", "")),
            )
            if nodes.node not in members:
                raise ValueError("the node is not among the members")
            nodes.port  # noqa: B018 - checks the node's address
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # ClusterUrlError too
            raise ConfigError(f"not a description of a node: {exc}") from None
        return nodes


class FixedMembership:
    """The members a fixed cluster was started with (module docstring). The same
    listener interface as :class:`~chute.cluster.membership.Membership`."""

    def __init__(self, nodes: FixedNodes) -> None:
        self.cluster = nodes.cluster
        self.node = nodes.node
        self.address = nodes.members[nodes.node]
        started = time.time()
        self._members = {
            name: Member(name, address, started, __version__, 0)
            for name, address in sorted(nodes.members.items())
        }
        self._state = NodeState.STARTING
        self._listeners: list[Listener] = []
        self._changed = asyncio.Event()

    @property
    def state(self) -> NodeState:
        return self._state

    @property
    def members(self) -> Mapping[str, Member]:
        """Every member, up or not: in a fixed cluster a node never leaves."""
        return dict(self._members)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` on every join (at start; there are no leaves)."""
        self._listeners.append(listener)

    async def wait_for(self, predicate: Callable[[FixedMembership], bool]) -> None:
        """Return once ``predicate(self)`` holds (bound it with ``asyncio.timeout``)."""
        while not predicate(self):
            await self._changed.wait()

    async def start(self) -> None:
        """Join every member (this node's listeners see a join for each, itself included)."""
        for member in self._members.values():
            event = MembershipEvent(EventKind.JOIN, member)
            for listener in self._listeners:
                listener(event)
        self._set_state(NodeState.REGISTERED)

    async def stop(self) -> None:
        """Stop (no leave: the others keep this node's place, and dial it until it is back)."""
        self._set_state(NodeState.STOPPED)

    def _set_state(self, state: NodeState) -> None:
        self._state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
