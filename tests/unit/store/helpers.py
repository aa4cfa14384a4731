"""Helpers for the store tests: messages, snapshots to compare, callbacks to wait on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from chute import content
from chute.core.model.store import AddOp, Recovered
from chute.message import BodyKind, Byte, Float, Int, Message, Short
from chute.store import payload

DEADLINE = 10.0  # seconds: a wait this long means the journal is stuck


def msg(body: bytes = b"body", **fields: Any) -> Message:
    fields.setdefault("id", f"id-{body[:20].hex()}")
    return Message(body, **fields)


def rich_message() -> Message:
    """Every field a producer or the broker can set, every property type."""
    return Message(
        b"\x00\xffbinary\x00",
        id="rich-1",
        priority=9,
        timestamp=1_700_000_000_123,
        expiration=1_800_000_000_000,
        correlation_id="corr",
        reply_to="queue:replies",
        type="order",
        persistent=True,
        redelivered=True,
        delivery_count=3,
        properties={
            "bool": True,
            "byte": Byte(-7),
            "short": Short(1234),
            "int": Int(-100_000),
            "long": 1 << 40,
            "float": Float(1.5),
            "double": 2.25,
            "string": "héllo",
        },
        kind=BodyKind.MAP,
    )


def add(queue: str, seq: int, body: bytes = b"", *, destination: str | None = None) -> AddOp:
    return AddOp(destination or queue, (queue,), seq, msg(body or f"{queue}-{seq}".encode()))


def describe(message: Message) -> dict[str, Any]:
    """A message as comparable data, property types included (Byte(3) == 3 otherwise)."""
    out = message.to_json()
    out["size"] = message.size
    return out


def snapshot(recovered: Recovered) -> dict[str, Any]:
    """What a recovery returned, in a form to compare with ``==``.

    Definitions are compared by name: compaction may move a definition
    forward, which changes the order they are replayed in, not what they are.
    """
    return {
        "definitions": sorted(recovered.definitions, key=lambda d: d.name),
        "messages": {
            queue: [(s.seq, s.delivery_count, describe(s.message)) for s in stored]
            for queue, stored in recovered.messages.items()
        },
        "prepared": {
            xid: [
                (type(op).__name__, op.queue if not isinstance(op, AddOp) else op.queues, op.seq)
                + ((describe(op.message),) if isinstance(op, AddOp) else ())
                for op in ops
            ]
            for xid, ops in recovered.prepared.items()
        },
        "next_seq": recovered.next_seq,
        "firsts": recovered.firsts,
    }


class Callbacks:
    """Sync callbacks that record what they were given; ``wait`` blocks with a deadline."""

    def __init__(self) -> None:
        self.results: list[BaseException | None] = []
        self.threads: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, error: BaseException | None) -> None:
        with self._cond:
            self.results.append(error)
            self.threads.append(threading.current_thread().name)
            self._cond.notify_all()

    def wait(self, count: int = 1, timeout: float = DEADLINE) -> list[BaseException | None]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.results) >= count, timeout):
                raise AssertionError(f"{len(self.results)} of {count} callbacks after {timeout} s")
            return list(self.results)


class Gate:
    """A FaultyDisk hook that holds one kind of operation until released."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, operation: str) -> None:
        if operation == self.operation and not self.released.is_set():
            self.entered.set()
            if not self.released.wait(DEADLINE):
                raise AssertionError("gate never released")

    def wait_entered(self) -> None:
        if not self.entered.wait(DEADLINE):
            raise AssertionError(f"no {self.operation} within {DEADLINE} s")


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the messages the journal decodes from here on; the returned function says
    how many so far."""
    decoded = 0
    decode = content.decode_content

    def counted(*args: Any) -> Message:
        nonlocal decoded
        decoded += 1
        return decode(*args)

    monkeypatch.setattr(payload, "decode_content", counted)
    return lambda: decoded
