"""A producer's pipelined sends to a stream, taken together.

A producer with a confirm window (or any that pipelines) has many sends in flight:
what one read brings holds runs of Send packets of one session to one stream. The
connection gathers such a run while it acts on its input (:meth:`SendRuns._gather`)
and acts on it as a whole (:meth:`SendRuns._send_run`): the session takes the sends in
one pass (:meth:`~chute.core.operations.session.BrokerSession.send_each`: one batch in the
store, the stream appending them at once, its readers woken once) and one sync
confirms them all, the answers in one write. What acts on one send alone acts on the
run as on each of its sends, in order: a send the session does not take together (one
that must wait for room, or is refused) is sent alone, and those after it wait behind
it as they would have in the connection's input.

:class:`SendRuns` is inherited by :class:`~chute.server.native.NativeConnection`; what
it needs of the connection is :class:`RunDriver`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, Final, Protocol

from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.message import Message, new_message_id
from chute.protocol import packets as p
from chute.protocol.splice import encode_ok
from chute.server.native_manage import Driver

RUN_MAX: Final = 256
"""The most sends a run gathers before it is acted on."""

Run = list[tuple[p.Header, p.Send]]


class RunDriver(Driver, Protocol):
    """What the runs need of their native connection."""

    broker: Broker
    sessions: dict[int, BrokerSession]
    _out: list[bytes]
    _run: Run

    @property
    def acting(self) -> bool: ...

    def _act_on(self, header: p.Header, packet: Any) -> None: ...


class SendRuns:
    """Gathering and acting on runs of sends, for :class:`~chute.server.native.NativeConnection`."""

    _run: Run  # the run being gathered: sends of one session to one stream, in order
    _work: Generator[None, None, None] | None  # the connection's request acted on in steps

    def _gather(self: RunDriver, header: p.Header, packet: Any) -> bool:
        """Take ``packet`` into the run if it is a send to a stream (acting on the run it
        ends, if any); else act on the run first. True if the packet needs nothing more:
        taken, or left to act on after a send of the run that waits for room."""
        run = self._run
        joins = type(packet) is p.Send and packet.address in self.broker.streams
        if joins and (not run or _joins(run[-1], header, packet)):
            run.append((header, packet))
            if len(run) >= RUN_MAX:
                SendRuns._end_run(self)
            return True
        if run:
            SendRuns._end_run(self)
            if not self.acting:  # a send of the run waits for room: this waits too
                self._work = _then(self, self._work, header, packet)
                return True
        if joins:
            self._run = [(header, packet)]
            return True
        return False

    def _end_run(self: RunDriver) -> None:
        """Act on the run gathered, if any."""
        run = self._run
        if run:
            self._run = []
            SendRuns._send_run(self, run)

    def _send_run(self: RunDriver, run: Run) -> None:
        """Act on ``run`` as ``_on_send`` of each would, in one pass (see the module
        docstring)."""
        header, first = run[0]
        session = self.sessions.get(header.target_id)
        taken = 0
        if session is not None and len(run) > 1:
            messages = [sent_message(packet) for _, packet in run]
            taken = session.send_each(first.address, messages, ttl=first.ttl_ms)
            asking = [h for h, _ in run[:taken] if h.correlation_id]
            if asking:
                self._after_sync(lambda error: _confirmed_each(self, asking, error))
        sends = iter(run[taken:])
        for header, packet in sends:
            self._act_on(header, packet)
            if not self.acting:  # it waits for room: the rest wait their turn
                self._work = _one_by_one(self, sends)
                return


def sent_message(packet: p.Send) -> Message:
    """The message ``packet`` sends, given an id if its producer left it without one (its
    stored content then encoded again, with the id), else keeping the content as it came
    to splice it into deliveries."""
    message = packet.message
    if not message.id:
        message.id = new_message_id()
        message.encoded = None
    elif message.encoded is None and packet.content is not None:
        message.encoded = packet.content
    return message


def _joins(last: tuple[p.Header, p.Send], header: p.Header, packet: p.Send) -> bool:
    """Whether a send joins the run that ``last`` ends: the same session, stream and ttl."""
    before, sent = last
    return (
        header.target_id == before.target_id
        and packet.address == sent.address
        and packet.ttl_ms == sent.ttl_ms
    )


def _confirmed_each(conn: RunDriver, headers: list[p.Header], error: BaseException | None) -> None:
    """The sends of a run are durable (or were not stored): answer each that asked."""
    if error is None:
        version = conn.codec.version
        conn._out.append(b"".join([encode_ok(h.correlation_id, version) for h in headers]))
        return
    for header in headers:
        conn._confirmed(header, error)


def _one_by_one(
    conn: RunDriver, sends: Iterator[tuple[p.Header, p.Send]]
) -> Generator[None, None, None]:
    for header, packet in sends:
        conn._act_on(header, packet)
        yield


def _then(
    conn: RunDriver, work: Generator[None, None, None] | None, header: p.Header, packet: Any
) -> Generator[None, None, None]:
    """``work``'s steps, then act on the packet that came after it."""
    if work is not None:
        yield from work
    conn._act_on(header, packet)
    yield
