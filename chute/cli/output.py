"""What the ``chute`` commands print: messages, the receive loop that prints them, and
``chute stat``'s line about the broker's sockets.

Shared by ``chute receive`` and ``chute dropbox receive``, so both print the
same JSON shape, show the same progress on a terminal, and end the same way when
fewer messages came than asked for.

``--json`` prints JSON (RFC 8259), which has no NaN or infinities: a float
property that is one (a JMS double may be) is printed as the string ``"NaN"``,
``"Infinity"`` or ``"-Infinity"`` (Java's spelling), its ``property_types``
entry still saying ``double`` or ``float``.

Reading a stream consumes nothing and promises no count: ``--count N`` is at
most N there. A reader that starts before the stream's end (the newest message
kept when the command starts, :func:`stream_end`) stops there with what it got,
status 0; one that starts past it (``--offset next``) waits for messages as a
queue's consumer does.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Protocol

from chute.cli.progress import Progress
from chute.errors import ChuteError
from chute.message import Message


class Received(Protocol):
    """A received message to acknowledge (the broker's and the dropbox client's)."""

    @property
    def message(self) -> Message: ...

    @property
    def seq(self) -> int:
        """Its delivery's number (a stream's message: its offset)."""

    def ack(self) -> None: ...


class Receiving(Protocol):
    def receive(self, timeout: float | None = None) -> Received | None: ...


class StreamLook(Protocol):
    """What :func:`stream_end` asks of a connection."""

    def cursor_open(self, address: str) -> tuple[int, int]: ...


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON text; a non-finite float becomes ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (JSON has no such numbers)."""
    return json.dumps(_finite(value), ensure_ascii=False, indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def stream_end(conn: StreamLook, address: str, offset: str | None) -> int | None:
    """The offset of the newest message of stream ``address`` now, if a reader from
    ``offset`` starts at or before it; else None (not a stream, none yet, a reader
    from ``next`` or past it, or the caller may not look: it then waits as on a queue).
    """
    if not address.startswith(("stream:", "/stream/")) or offset in (None, "next"):
        return None
    try:
        first, head = conn.cursor_open(address)
    except ChuteError:  # none yet, or looking needs browse as well as consume
        return None
    number = offset.removeprefix("offset=")
    if head <= first or (number.isdigit() and int(number) >= head):
        return None
    return head - 1


def print_message(message: Message, as_json: bool, *, flush: bool = True) -> None:
    """One JSON object per line (``--json``), else the raw body and a newline; written
    at once with ``flush``, else when the output's buffer fills (many messages)."""
    if as_json:
        print(json_text(message.to_json()), flush=flush)
    else:
        sys.stdout.buffer.write(message.body + b"\n")
        if flush:
            sys.stdout.flush()


def print_received(
    consumer: Receiving,
    count: int,
    timeout: float,
    as_json: bool,
    *,
    progress: Progress | None = None,
    last: int | None = None,
) -> int:
    """Print and ack up to ``count`` messages (0: until ``timeout`` passes with none);
    the exit status: 1 if fewer than ``count`` came. ``progress`` (a bar on standard
    error, drawn on a terminal only) counts them; it is closed at the end. ``last``: a
    stream's end (:func:`stream_end`), where its reader stops, as it does when
    ``timeout`` passes with none, with status 0 either way."""
    received = 0
    same_terminal = progress is not None and progress.shown and sys.stdout.isatty()
    try:
        while count == 0 or received < count:
            message = consumer.receive(timeout=timeout)
            if message is None:
                break
            if same_terminal and progress is not None:
                progress.clear()
            print_message(message.message, as_json)
            message.ack()
            received += 1
            if progress is not None:
                progress.advance()
            if last is not None and message.seq >= last:
                break
    finally:
        if progress is not None:
            progress.close()
    if count and received < count and last is None:
        print(
            f"chute: received {received} of {count} messages before the {timeout:g} s timeout",
            file=sys.stderr,
        )
        return 1
    return 0


def sockets_line(sockets: dict[str, Any]) -> str:
    """``chute stat``'s summary of the broker's ``sockets`` statistics: what is open,
    what has not logged in yet, and what the connection limits refused or closed."""
    listeners = ", ".join(f"{n} {name}" for name, n in sockets.get("by_listener", {}).items())
    line = f"{sockets.get('open', 0)} sockets open ({sockets.get('before_login', 0)} not logged in"
    line += f"; {listeners})" if listeners else ")"
    done = [
        (sockets.get("refused_max_connections", 0), "refused by max_connections"),
        (sockets.get("refused_max_connections_per_host", 0), "by max_connections_per_host"),
        (sockets.get("login_timeouts", 0), "closed by login_timeout_ms"),
        (sockets.get("idle_timeouts", 0), "by idle_timeout_ms"),
    ]
    told = [f"{n} {what}" for n, what in done if n]
    return line + ("; " + ", ".join(told) if told else "")
