"""``chute dropbox ...``: work on a dropbox root with no broker.

- ``chute dropbox init ROOT DEST...``: create queue (``NAME``/``queue:NAME``) and
  topic (``topic:NAME``) dropboxes, and what DropboxMQ's ``create-dropbox``
  creates beside them (``ROOT/dropboxmq/``, see :mod:`chute.dropbox.layout`);
- ``chute dropbox send --root ROOT DEST [BODY]``: write one message file
  (waiting up to ``--block-timeout`` seconds while DropboxMQ's write lock holds
  it back, see :mod:`chute.dropbox.flow`);
- ``chute dropbox receive --root ROOT DEST [--count N] [--json]``: consume, printing
  what ``chute receive`` prints (the same JSON shape, and on a terminal the same
  progress bar on standard error); a read-locked dropbox looks empty;
- ``chute dropbox recover --root ROOT DEST --client NAME``: give a killed
  consumer's claimed files (``processing/NAME~...``) back to ``target/``;
- ``chute dropbox distribute --root ROOT TOPIC``: fan out a topic's ``.incoming``.

Errors print one line, as every ``chute`` command does (see :mod:`chute.cli`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from chute.cli.message import add_message_arguments, message_fields, seconds, whole
from chute.cli.output import print_received
from chute.cli.progress import Progress
from chute.core.model.address import Kind, parse
from chute.dropbox.client import DropboxConnection, open_root
from chute.dropbox.consumer import DropboxConsumer
from chute.dropbox.layout import init_queue, init_topic
from chute.dropbox.maintenance import recover_client, recover_layout
from chute.dropbox.options import DEFAULT_BLOCK_TIMEOUT_MS, DropboxOptions, default_client_id
from chute.dropbox.topic import distribute
from chute.errors import ConfigError
from chute.message import BodyKind

__all__ = ["add_dropbox_commands"]


def add_dropbox_commands(sub: Any) -> None:
    """Register ``chute dropbox`` and its subcommands on the ``chute`` parser."""
    dropbox = sub.add_parser("dropbox", help="serverless messaging on a DropboxMQ directory")
    commands = dropbox.add_subparsers(dest="dropbox_command", metavar="COMMAND", required=True)

    init = commands.add_parser(
        "init", help="create queue and topic dropboxes (and DropboxMQ's dropboxmq/ directory)"
    )
    init.add_argument("root", type=Path, help="the dropbox root directory")
    init.add_argument(
        "destinations", nargs="+", metavar="DEST", help="NAME, queue:NAME, topic:NAME"
    )
    init.set_defaults(func=_init)

    send = commands.add_parser("send", help="write one message into a dropbox")
    _root(send)
    send.add_argument("destination", metavar="DEST", help="NAME, queue:NAME or topic:NAME")
    send.add_argument(
        "body", nargs="?", help="the body (text); read from stdin (bytes) if left out or '-'"
    )
    add_message_arguments(send, id_help="message id (default: a DropboxMQ id carrying the time)")
    send.add_argument("--kind", choices=[k.value for k in BodyKind], help="body kind")
    send.add_argument("--no-sync", action="store_true", help="do not fsync the file")
    send.add_argument(
        "--block-timeout",
        type=seconds,
        default=DEFAULT_BLOCK_TIMEOUT_MS / 1000,
        help="seconds to wait while DropboxMQ's write-lock.properties holds the send back "
        "(default %(default)g)",
    )
    send.set_defaults(func=_send)

    receive = commands.add_parser("receive", help="consume messages from a dropbox")
    _root(receive)
    receive.add_argument("destination", metavar="DEST")
    receive.add_argument("--count", type=whole(), default=1, help="how many (0 = until timeout)")
    receive.add_argument(
        "--timeout", type=seconds, default=5.0, help="seconds to wait for each message (default 5)"
    )
    receive.add_argument("--selector", help="JMS selector over headers and properties")
    receive.add_argument("--json", action="store_true", help="one JSON object per message")
    receive.add_argument("--client", help="client id claimed files carry (default <host>-<pid>)")
    receive.add_argument("--subscription", help="topics: the (durable) subscription to read")
    receive.set_defaults(func=_receive)

    recover = commands.add_parser(
        "recover", help="give a killed consumer's claimed files back to target/"
    )
    _root(recover)
    recover.add_argument("destination", metavar="DEST")
    recover.add_argument("--client", required=True, help="the dead consumer's client id")
    recover.add_argument(
        "--subscription", help="topics: the subscription (directory <sub>.<client>)"
    )
    recover.set_defaults(func=_recover)

    fanout = commands.add_parser(
        "distribute", help="fan out the files in a topic's .incoming to its subscriptions"
    )
    _root(fanout)
    fanout.add_argument("topic", metavar="TOPIC", help="NAME or topic:NAME")
    fanout.set_defaults(func=_distribute)


def _root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, required=True, help="the dropbox root directory")


def _open(
    root: Path, client_id: str | None = None, block_timeout: float = DEFAULT_BLOCK_TIMEOUT_MS / 1000
) -> DropboxConnection:
    options = DropboxOptions(
        root, client_id or default_client_id(), block_timeout_ms=round(block_timeout * 1000)
    )
    return open_root(options)


def _init(args: argparse.Namespace) -> int:
    for destination in args.destinations:
        addr = parse(destination)
        if addr.kind is Kind.TOPIC:
            print(init_topic(args.root, addr.name).dir)
        else:
            print(init_queue(args.root, addr.name).base.parent)
    return 0


def _send(args: argparse.Namespace) -> int:
    from_stdin = args.body is None or args.body == "-"
    body: bytes | str = sys.stdin.buffer.read() if from_stdin else args.body
    if args.block_timeout < 0:
        raise ConfigError("--block-timeout must be 0 or more")
    fields = message_fields(args)
    with _open(args.root, block_timeout=args.block_timeout) as conn, conn.session() as session:
        session.send(
            args.destination,
            body,
            kind=BodyKind(args.kind) if args.kind else None,
            persistent=not args.no_sync,
            **fields,
        )
    return 0


def _receive(args: argparse.Namespace) -> int:
    if args.count < 0:
        raise ConfigError("--count must be 0 or more")
    addr = parse(args.destination)
    if addr.kind is Kind.TOPIC and not args.subscription:
        raise ConfigError("receiving from a topic needs --subscription NAME")
    with (
        _open(args.root, args.client) as conn,
        conn.session(ack="client") as session,
    ):
        consumer: DropboxConsumer
        if addr.kind is Kind.TOPIC:
            consumer = session.consumer(
                args.destination,
                selector=args.selector,
                subscription=args.subscription,
                durable=True,
            )
        else:
            consumer = session.consumer(args.destination, selector=args.selector)
        # a bar on standard error while many files are read (on a terminal only)
        progress = Progress(sys.stderr, args.destination, args.count) if args.count > 1 else None
        return print_received(consumer, args.count, args.timeout, args.json, progress=progress)


def _recover(args: argparse.Namespace) -> int:
    addr = parse(args.destination)
    if addr.kind is Kind.TOPIC:
        if not args.subscription:
            raise ConfigError("recovering in a topic needs --subscription NAME")
        layout = init_topic(args.root, addr.name).subscription(args.subscription, args.client)
        restored = recover_layout(layout, args.client)
    else:
        restored = recover_client(args.root, addr.name, args.client)
    for name in restored:
        print(name)
    print(f"chute: {len(restored)} file(s) of {args.client} back in target/", file=sys.stderr)
    return 0


def _distribute(args: argparse.Namespace) -> int:
    name = args.topic[len("topic:") :] if args.topic.startswith("topic:") else args.topic
    count = distribute(args.root, name)
    print(f"chute: distributed {count} file(s)", file=sys.stderr)
    return 0
