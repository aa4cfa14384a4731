"""Diversion: where a message goes when it leaves a queue unconsumed, and forwarding.

A message that expires goes to its queue's expiry address; one rejected,
delivered ``max_deliveries`` times, pushed out by an overflow policy or that a
callback queue could not forward goes to its dead-letter address. Either way a
*copy* is routed there (fresh delivery fields, no expiration), carrying where
it came from (:data:`ORIGINAL_DESTINATION`) and why (:data:`DIVERT_REASON`).
A callback queue's forwarding routes copies onwards the same way. A queue AMQP
declared with a dead-letter exchange (the broker's ``exchanges.dead_letters``) sends
its expired, rejected, pushed-out and over-delivered messages through that exchange
instead; what it routes nowhere is dropped, as in RabbitMQ.

Both guard against loops (a dead-letter address that forwards back, a ring of
callback queues): past :data:`MAX_FORWARD_DEPTH` hops a forward is refused, and
what a loop gave up on gets one hop more, so it still reaches its dead-letter
queue; a diversion with nowhere left to go is discarded, counted and logged.

A subscriber far behind may lose thousands of messages a second to its
overflow policy: each is counted in its queue's statistics, and the log says it
for the first one and then once a minute (:data:`LOG_INTERVAL_MS`) with how many
followed. Used from the broker's loop only.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol

from chute.core.model.queue import QueueChannel, Reason
from chute.core.model.readers import StreamReader
from chute.core.model.registry import Destination, Registry
from chute.core.rules.exchanges import DeadLettering, Exchanges
from chute.core.rules.routing import Route
from chute.errors import DestinationFull, InvalidAddress, NotFound
from chute.message import Message

log = logging.getLogger("chute.broker")

ORIGINAL_DESTINATION: Final = "chute_original_destination"
DIVERT_REASON: Final = "chute_reason"
MAX_FORWARD_DEPTH: Final = 8
LOG_INTERVAL_MS: Final = 60_000


class DiversionHost(Registry, Protocol):
    """What diverting and forwarding need from the broker."""

    exchanges: Exchanges

    def route(self, dest: Destination, message: Message) -> Route:
        """Where ``message`` goes (raises DestinationFull)."""

    def place(self, route: Route) -> None:
        """Place a route's entries in their queues."""


class Diversion:
    """Diverts and forwards copies of messages for one broker; counts what it discards."""

    def __init__(self, host: DiversionHost) -> None:
        self.host = host
        self.discarded = 0  # diversions that found no room anywhere
        self._depth = 0  # hops of the diversion or forward under way
        self._logged: dict[tuple[str, Reason], tuple[int, int]] = {}  # see _log

    def divert(self, queue: QueueChannel, message: Message, reason: Reason) -> None:
        """Send a copy of ``message``, which left ``queue`` unconsumed, to its expiry or
        dead-letter address (or discard it, counted, if there is nowhere to put it)."""
        settings = queue.settings
        target = settings.expiry if reason is Reason.EXPIRED else settings.dead_letter
        # One hop past MAX_FORWARD_DEPTH is allowed, so that what a forwarding
        # loop gave up on still reaches the dead-letter queue.
        if target == queue.address or self._depth > MAX_FORWARD_DEPTH:
            # Usually a full sink dropping its oldest (it is its own dead-letter address):
            # a flood's worth a second, so logged once a minute like any other diversion.
            self.discarded += 1
            nowhere = (
                f"a forwarding loop past {MAX_FORWARD_DEPTH} hops"
                if target != queue.address
                else _kept(queue)
            )
            self._log(queue, reason, message, f"discarded ({_why(reason)}): {nowhere}")
            return
        properties = dict(message.properties)
        properties.setdefault(ORIGINAL_DESTINATION, queue.address)
        properties[DIVERT_REASON] = reason.value
        copy = message.replace(
            properties=properties, expiration=0, redelivered=False, delivery_count=0
        )
        exchange = self.host.exchanges.dead_letters.get(queue.address)
        if exchange is not None and reason is not Reason.FORWARD_FAILED:
            self._through_exchange(exchange, queue, copy, reason)
            return
        if reason is Reason.EXPIRED:
            log.debug("message %s from %s moved to %s: expired", message.id, _shown(queue), target)
        else:
            self._log(queue, reason, message, f"moved to {target}: {reason.value}")
        try:
            self._send_on(target, copy, create=True)
        except (DestinationFull, InvalidAddress, NotFound) as exc:
            self.discarded += 1
            log.error(
                "discarded %s from %s (%s): %s could not take it: %s",
                message.id,
                queue.address,
                reason.value,
                target,
                exc.reason,
            )

    def _through_exchange(
        self, exchange: DeadLettering, queue: QueueChannel, copy: Message, reason: Reason
    ) -> None:
        targets = exchange.divert(queue.address, copy, reason.value, self.host.clock())
        if not targets:
            self.discarded += 1
            self._log(queue, reason, copy, "dropped: its dead-letter exchange routes it nowhere")
            return
        if reason is Reason.EXPIRED:
            log.debug("message %s from %s dead-lettered: expired", copy.id, _shown(queue))
        else:
            self._log(queue, reason, copy, f"dead-lettered through its exchange: {reason.value}")
        for address, each in targets:
            try:
                self._send_on(address, each, create=False)
            except (DestinationFull, InvalidAddress, NotFound) as exc:
                self.discarded += 1
                log.error(
                    "discarded %s from %s (%s): %s could not take it: %s",
                    copy.id,
                    queue.address,
                    reason.value,
                    address,
                    exc.reason,
                )

    def forward(self, address: str, message: Message) -> None:
        """Route a copy of ``message`` onwards (callback queues), guarding against loops.

        Raises:
            DestinationFull: the target is full, or the forwarding loops.
        """
        if self._depth >= MAX_FORWARD_DEPTH:
            raise DestinationFull(f"forwarding to {address} loops ({MAX_FORWARD_DEPTH} hops)")
        self._send_on(address, message.replace(redelivered=False, delivery_count=0))

    def _send_on(self, address: str, copy: Message, *, create: bool | None = None) -> None:
        """Route, record and place ``copy`` one hop deeper."""
        host = self.host
        self._depth += 1
        try:
            route = host.route(host.destination(address, create=create), copy)
            if route.record is not None:
                host.store.add(route.record)
            host.place(route)
        finally:
            self._depth -= 1

    def _log(self, queue: QueueChannel, reason: Reason, message: Message, what: str) -> None:
        """A warning for the first diversion of a queue for a reason, then one a minute at
        most with how many followed; ``what`` says where the message went and why."""
        key = (queue.name, reason)
        now = self.host.clock()
        count, since = self._logged.get(key, (0, 0))
        if since and now - since < LOG_INTERVAL_MS:
            self._logged[key] = (count + 1, since)
            log.debug("message %s from %s %s", message.id, _shown(queue), what)
            return
        more = f" (and {count} more in the last {(now - since) // 1000} s)" if count else ""
        log.warning(
            "message %s from %s %s%s; more are counted, not logged, for a minute",
            message.id,
            _shown(queue),
            what,
            more,
        )
        self._logged[key] = (0, now)


def _why(reason: Reason) -> str:
    """Why a message was let go with nowhere to go, in words."""
    if reason is Reason.DROPPED_OLDEST:
        return "the oldest, to make room"
    if reason is Reason.OVERFLOW:
        return "no room for it"
    return str(reason.value)


def _kept(queue: QueueChannel) -> str:
    """What a sink keeps (it is its own dead-letter address), for the line that says it let
    a message go."""
    s = queue.settings
    bounds = [f"{s.max_messages} messages"] if s.max_messages else []
    if s.max_bytes:
        size = s.max_bytes
        bounds.append(f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size} bytes")
    kept = [f"at most {' and '.join(bounds)}"] if bounds else []
    if s.transient_in_memory:
        kept.append("its non-persistent messages in memory only, within a quarter of max_memory")
    if not kept:
        return f"{queue.address} is its own dead-letter address"
    return f"{queue.address} keeps {'; '.join(kept)}"


def _shown(queue: QueueChannel) -> str:
    """How a log line names ``queue``: a stream's reader by its stream (its own name is
    an internal key), any other queue or subscription by its name."""
    return queue.address if isinstance(queue, StreamReader) else queue.name
