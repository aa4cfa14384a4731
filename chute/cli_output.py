"""What the ``chute`` commands print: messages, the receive loop that prints them, and
``chute stat``'s line about the broker's sockets.

Shared by ``chute receive`` and ``chute dropbox receive``, so both print the
same JSON shape, show the same progress on a terminal, and end the same way when
fewer messages came than asked for.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Protocol

from chute.cli_progress import Progress
from chute.message import Message


class Received(Protocol):
    """A received message to acknowledge (the broker's and the dropbox client's)."""

    @property
    def message(self) -> Message: ...

    def ack(self) -> None: ...


class Receiving(Protocol):
    def receive(self, timeout: float | None = None) -> Received | None: ...


def print_message(message: Message, as_json: bool, *, flush: bool = True) -> None:
    """One JSON object per line (``--json``), else the raw body and a newline; written
    at once with ``flush``, else when the output's buffer fills (many messages)."""
    if as_json:
        print(json.dumps(message.to_json(), ensure_ascii=False), flush=flush)
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
) -> int:
    """Print and ack up to ``count`` messages (0: until ``timeout`` passes with none);
    the exit status: 1 if fewer than ``count`` came. ``progress`` (a bar on standard
    error, drawn on a terminal only) counts them; it is closed at the end."""
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
    finally:
        if progress is not None:
            progress.close()
    if count and received < count:
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
