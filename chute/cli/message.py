"""The message a ``chute send`` or ``chute dropbox send`` command line describes.

Both commands take the same message fields and pass them to a session's
``send`` (the broker's or the dropbox client's, which share its keywords):
:func:`add_message_arguments` declares them, :func:`message_fields` turns the
parsed arguments into those keywords. :func:`whole` and :func:`seconds` are the
argument types of every count and duration on both command lines: a value out of
range is argparse's usage error, not a traceback later; :class:`UsageError` is
what a command raises for arguments that make no sense together (exit status 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from chute.errors import ChuteError, ConfigError


class UsageError(ChuteError):
    """Arguments that make no sense together (moving a queue to itself, say): the
    ``chute`` command prints ``chute: error: ...`` and exits with status 2."""

    code = "usage-error"


def whole(low: int = 0, high: int | None = None) -> Callable[[str], int]:
    """An argument type: a whole number from ``low`` to ``high`` (None: no end)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            span = f"{low}..{high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {span}, not {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argument type: a duration in seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def add_message_arguments(parser: argparse.ArgumentParser, *, id_help: str) -> None:
    """``--priority``, ``--ttl``, ``--property``, ``--correlation-id``, ``--reply-to``,
    ``--type`` and ``--id`` (``id_help`` says what the default id is)."""
    parser.add_argument("--priority", type=whole(0, 9), default=4, help="0..9 (default 4)")
    parser.add_argument(
        "--ttl", type=whole(), default=0, help="time to live in ms (0 = never expires)"
    )
    parser.add_argument(
        "--property",
        "-p",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a property; VALUE is typed like JSON (42, 1.5, true) else a string",
    )
    parser.add_argument("--correlation-id")
    parser.add_argument("--reply-to")
    parser.add_argument("--type")
    parser.add_argument("--id", help=id_help)


def message_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``send`` keywords of the arguments :func:`add_message_arguments` declared.

    Raises:
        ConfigError: a ``--property`` that is not NAME=VALUE.
    """
    return {
        "priority": args.priority,
        "ttl": args.ttl,
        "properties": dict(parse_property(p) for p in args.property),
        "correlation_id": args.correlation_id,
        "reply_to": args.reply_to,
        "type": args.type,
        "id": args.id,
    }


def parse_property(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as (name, value): a JSON boolean, number or string, else the text.

    Raises:
        ConfigError: no ``=``, or no name.
    """
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise ConfigError(f"--property {text!r}: expected NAME=VALUE")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return name, raw
    if isinstance(value, bool | int | float | str):
        return name, value
    return name, raw
