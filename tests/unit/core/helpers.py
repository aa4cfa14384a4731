"""Test doubles for driving the pure core the way an adapter does.

A :class:`FakeClock` stands in for time (advance it, never sleep) and a
:class:`Recorder` is a Receiver that keeps what was pushed to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chute.core.model.consumer import BrokerConsumer, Entry
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.model.store import AckOp, AddOp, TxOp
from chute.core.operations import looking
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.store.memory import MemoryStore

START = 1_700_000_000_000


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int = START) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Recorder:
    """A Receiver that records every push (and can ack as it goes, like an eager client)."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[BrokerConsumer, Entry]] = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.deliveries.append((consumer, entry))

    @property
    def entries(self) -> list[Entry]:
        return [entry for _, entry in self.deliveries]

    @property
    def bodies(self) -> list[bytes]:
        return [entry.message.body for _, entry in self.deliveries]

    def take(self) -> list[Entry]:
        """What arrived since the last take."""
        taken = self.entries
        self.deliveries.clear()
        return taken


class RecordingStore(MemoryStore):
    """A MemoryStore that also logs every call, to check what reached the store and when."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def add(self, op: AddOp) -> None:
        self.calls.append(("add", op))
        super().add(op)

    def ack(self, op: AckOp) -> None:
        self.calls.append(("ack", op))
        super().ack(op)

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        """Logged as one ``ack`` per message: what reached the store, not how."""
        self.calls += [("ack", AckOp(queue, seq)) for seq in seqs]
        MemoryStore.acks(self, queue, seqs)

    def commit(self, ops: Sequence[TxOp]) -> None:
        self.calls.append(("commit", list(ops)))
        for op in ops:  # not through self.add/self.ack: those would log the ops again
            if isinstance(op, AddOp):
                MemoryStore.add(self, op)
            else:
                MemoryStore.ack(self, op)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def make_broker(
    settings: Mapping[str, DestinationSettings] | None = None,
    *,
    store: MemoryStore | None = None,
    clock: FakeClock | None = None,
) -> Broker:
    return Broker(
        store if store is not None else MemoryStore(),
        SettingsResolver(settings or {}),
        clock=clock or FakeClock(),
    )


def restart(broker: Broker) -> Broker:
    """A new broker over the same store, recovered: what a crash and a restart look like."""
    fresh = Broker(memory(broker), broker.settings, clock=broker.clock)
    fresh.recover()
    return fresh


def msg(body: bytes | str = b"x", **fields: Any) -> Message:
    return Message.create(body, **fields)


def bodies(entries: Sequence[Entry]) -> list[bytes]:
    return [entry.message.body for entry in entries]


def stats_of(broker: Broker, address: str) -> dict[str, Any]:
    """One destination's stats as ``Broker.stats`` reports them."""
    for dest in looking.stats(broker)["destinations"]:
        if dest["address"] == address:
            found: dict[str, Any] = dest
            return found
    raise AssertionError(f"{address} is not in the broker's stats")


def memory(broker: Broker) -> MemoryStore:
    """The broker's store, which in these tests is a MemoryStore."""
    assert isinstance(broker.store, MemoryStore)
    return broker.store


def stored(broker: Broker, queue: str) -> list[bytes]:
    """The bodies the MemoryStore holds for ``queue``, in sequence order."""
    held = memory(broker).messages.get(queue, {})
    return [held[seq].message.body for seq in sorted(held)]
