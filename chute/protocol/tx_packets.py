"""The native protocol's transaction packets: a session's local commit and rollback, and
the two-phase ones (prepare, commit or roll back a prepared transaction by its xid, list
them, commit a Spark sink's batch of them at once).

Plain frozen data like every packet; their tags are
:class:`chute.protocol.packets.PacketType`'s, which re-exports them. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Commit:
    """Commit a transacted session's sends and acks. ``session_id`` is the target."""

    session_id: int


@dataclass(frozen=True, slots=True)
class Rollback:
    """Roll back a transacted session's sends and acks. ``session_id`` is the target."""

    session_id: int


@dataclass(frozen=True, slots=True)
class XaPrepare:
    """Prepare a transacted session's work under ``xid`` (two-phase); the server answers
    Ok once the prepare record is durable. ``session_id`` is the target."""

    session_id: int
    xid: str


@dataclass(frozen=True, slots=True)
class XaCommit:
    """Commit the prepared transaction ``xid`` (from any connection, also after a restart)."""

    xid: str


@dataclass(frozen=True, slots=True)
class XaRollback:
    """Roll back the prepared transaction ``xid``."""

    xid: str


@dataclass(frozen=True, slots=True)
class XaRecover:
    """List the prepared transactions; the answer is ``Ok`` with a JSON array of xids."""


@dataclass(frozen=True, slots=True)
class XaCommitBatch:
    """Commit the prepared transactions ``xids`` together, once per (``sink``, ``batch``).

    The broker records a durable marker naming the xids before it commits them
    (and rolls them forward after a crash), so the group commits all or none.
    With ``keep``, the marker stays as the sink's newest committed batch: a
    later XaCommitBatch of the same sink with ``batch`` at or below it is a
    duplicate (a batch Spark retried), whose xids are rolled back instead. The
    answer is ``Ok("committed")`` or ``Ok("duplicate")``, once durable.
    """

    sink: str
    batch: int
    xids: tuple[str, ...]
    keep: bool = True
