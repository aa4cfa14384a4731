"""The ``chute`` command: ``serve``, ``send``, ``receive``, ``browse``, ``purge``, ``delete``,
``move``, ``dlq retry``, ``create``, ``stat``, ``tx``, ``cert``.

Errors a user can fix are printed as one line (``chute: error: ...``) with
exit status 2 for bad usage or configuration and 1 for a failed operation;
never a traceback. Ctrl-C ends any command quietly with status 130. The
management commands print a JSON result with ``--json``.

This module holds the parser, :func:`main` and the commands of a broker's
messages; the package's other modules hold the rest:

- :mod:`chute.cli.serve`: ``chute serve``, one broker or (``--nodes``) several;
- :mod:`chute.cli.message`: the arguments of a message to send, shared by ``send``
  and ``chute dropbox send``;
- :mod:`chute.cli.output`: what a received message, a browse page or a JSON result
  prints; :mod:`chute.cli.progress`: the progress bar on standard error;
- :mod:`chute.cli.manage`: ``move``, ``dlq retry`` and ``create``;
- :mod:`chute.cli.stat`: ``chute stat``'s table;
- :mod:`chute.cli.cert`: ``chute cert`` (cryptography only when it runs);
- :mod:`chute.cli.dropbox`: ``chute dropbox ...``, a dropbox root with no broker.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chute import __version__
from chute.cli.manage import add_create_command, add_move_commands
from chute.cli.message import UsageError, add_message_arguments, message_fields, seconds, whole
from chute.cli.output import json_text, print_message, print_received, stream_end
from chute.cli.progress import Progress
from chute.cli.serve import add_serve_command
from chute.cli.stat import backup_text, ctrl_c_between_draws, render, watch
from chute.errors import ChuteError, ConfigError, NotLive

DEFAULT_URL = "chute://127.0.0.1:5445"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # serve --nodes runs it again
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        result: int = args.func(args)
        return result
    except ConfigError as exc:
        print(f"chute: configuration error: {exc.reason}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"chute: error: {exc.reason}", file=sys.stderr)
        return 2
    except ChuteError as exc:
        print(f"chute: error: {exc.reason}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"chute: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chute", description="chute, a message broker.")
    parser.add_argument("--version", action="version", version=f"chute {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_serve_command(sub)
    _add_client_commands(sub)
    _add_cert(sub)
    from chute.cli.dropbox import add_dropbox_commands  # noqa: PLC0415 - its own module

    add_dropbox_commands(sub)
    return parser


def _add_cert(sub: Any) -> None:
    cert = sub.add_parser(
        "cert",
        help="make a CA, a broker certificate and client certificates to try TLS out",
        description="Write a self-signed CA, the broker's certificate and key, and client "
        "certificates (--client NAME) into DIR, then print the configuration to use. "
        "Files that exist are kept, and the CA there signs what is new.",
    )
    cert.add_argument("dir", type=Path, help="where to write the files (made if missing)")
    cert.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name or address clients use for the broker, besides localhost, "
        "127.0.0.1 and ::1 (repeatable)",
    )
    cert.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="USER",
        help="also make a client certificate whose commonName is USER (repeatable)",
    )
    cert.add_argument(
        "--days", type=int, default=365, help="how long the certificates last (default 365)"
    )
    cert.add_argument(
        "--key-type",
        choices=("rsa", "ec"),
        default="rsa",
        help="rsa (2048 bits, default: every client loads it) or ec (ECDSA P-256)",
    )
    cert.add_argument("--force", action="store_true", help="replace files that exist")
    cert.set_defaults(func=_cert)


def _cert(args: argparse.Namespace) -> int:
    from chute.cli.cert import run  # noqa: PLC0415 - cryptography only when used

    return run(args)


def _add_client_commands(sub: Any) -> None:
    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--url",
            default=os.environ.get("CHUTE_URL", DEFAULT_URL),
            help=f"broker URL (default {DEFAULT_URL}, or $CHUTE_URL); chutes:// for TLS; "
            "ws(s)://host:8445/chute or http(s)://host:8445/chute through the HTTP port; "
            "chute://LOGIN:PASSCODE@host:port logs in (percent-encoded); "
            "chute://h1:5445,h2:5445 lists the nodes of a cluster (any one that answers)",
        )
        p.add_argument("--login", help="login (wins over the URL's; else $CHUTE_LOGIN)")
        p.add_argument("--passcode", help="passcode (wins over the URL's; else $CHUTE_PASSCODE)")
        tls = p.add_argument_group("TLS, for chutes://, wss:// and https:// URLs")
        tls.add_argument("--tls-ca", metavar="FILE", help="PEM CA file to trust for the broker")
        tls.add_argument(
            "--tls-cert",
            metavar="FILE",
            help="PEM client certificate (its commonName names your user), for a broker "
            "that asks for one",
        )
        tls.add_argument("--tls-key", metavar="FILE", help="its PEM key, if not in --tls-cert")

    send = sub.add_parser("send", help="send one message")
    send.add_argument("destination", help="queue:NAME, topic:NAME or NAME")
    send.add_argument("body", nargs="?", help="the body; read from stdin when left out or '-'")
    add_message_arguments(send, id_help="message id (default: generated)")
    send.add_argument("--non-persistent", action="store_true", help="do not store on disk")
    client_args(send)
    send.set_defaults(func=_send)

    receive = sub.add_parser("receive", help="receive (consume) messages")
    receive.add_argument("destination")
    receive.add_argument(
        "--count",
        type=whole(),
        default=1,
        help="how many (0 = until timeout); a stream read from an offset: at most this many, "
        "to its end",
    )
    receive.add_argument(
        "--timeout", type=seconds, default=5.0, help="seconds to wait for each message (default 5)"
    )
    receive.add_argument("--selector", help="JMS selector, e.g. \"region = 'eu'\"")
    receive.add_argument(
        "--offset",
        help="streams: where to start reading (first, last, next, N or timestamp=MS; "
        "default next); nothing is consumed",
    )
    receive.add_argument("--json", action="store_true", help="one JSON object per message")
    client_args(receive)
    receive.set_defaults(func=_receive)

    browse = sub.add_parser(
        "browse",
        help="look at a queue without consuming",
        description="Print every message of a queue in sequence order, nothing consumed, "
        "page by page (a queue of any size). On a terminal, standard error shows progress.",
    )
    browse.add_argument("destination")
    browse.add_argument("--selector")
    browse.add_argument("--limit", type=whole(), default=0, help="at most this many (0 = all)")
    browse.add_argument("--json", action="store_true")
    client_args(browse)
    browse.set_defaults(func=_browse)

    _add_removal_commands(sub, client_args)
    add_move_commands(sub, client_args, _connect)
    add_create_command(sub, client_args, _connect)

    stat = sub.add_parser(
        "stat",
        help="destinations with depth, consumers and in/out counts, as a table",
        description="A table of the destinations (subscriptions under their topic) with "
        "their depth, consumers and counters, then the broker-wide figures. --json prints "
        "the statistics as one JSON document instead; --watch redraws every few seconds, "
        "with rates, until Ctrl-C.",
    )
    stat.add_argument(
        "pattern", nargs="?", help="only these destinations: an address, * for any characters"
    )
    stat.add_argument("--json", action="store_true", help="the JSON document, not the table")
    stat.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=_interval_or_pattern,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) with per-second rates, until Ctrl-C",
    )
    stat.add_argument("--count", type=whole(1), help="with --watch: stop after this many draws")
    client_args(stat)
    stat.set_defaults(func=_stat)
    tx = sub.add_parser("tx", help="prepared (two-phase) transactions: list, commit, roll back")
    tx.add_argument("action", choices=["list", "commit", "rollback"])
    tx.add_argument("xid", nargs="?", help="the transaction id (commit, rollback)")
    tx.add_argument("--json", action="store_true", help='list: {"prepared": [xid, ...]}')
    client_args(tx)
    tx.set_defaults(func=_tx)
    passwd = sub.add_parser(
        "passwd", help="print the hash of a password, for a [users.NAME] table's password"
    )
    passwd.add_argument(
        "--stdin", action="store_true", help="read the password from standard input"
    )
    passwd.set_defaults(func=_passwd)


def _add_removal_commands(sub: Any, client_args: Callable[[argparse.ArgumentParser], None]) -> None:
    purge = sub.add_parser(
        "purge", help="remove every waiting message of a queue (those in flight stay)"
    )
    purge.add_argument("destination")
    purge.add_argument("--json", action="store_true", help='print {"purged": N, ...}')
    client_args(purge)
    purge.set_defaults(func=_purge)
    delete = sub.add_parser(
        "delete", help="delete a queue or topic: its messages go, its consumers are closed"
    )
    delete.add_argument("destination")
    delete.add_argument(
        "--force",
        action="store_true",
        help="also delete a topic's durable subscriptions and their messages",
    )
    delete.add_argument("--json", action="store_true", help='print {"deleted": N, ...}')
    client_args(delete)
    delete.set_defaults(func=_delete)


# -- client commands ------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> Any:
    """Connect as the arguments say: the login from --login, else the URL's, else
    $CHUTE_LOGIN; the passcode likewise (the URL's only with the URL's login)."""
    import chute  # noqa: PLC0415
    from chute.client.url import parse_url  # noqa: PLC0415

    login, passcode = args.login, args.passcode
    if not args.url.lower().startswith("dropbox:"):
        login, passcode = parse_url(args.url).credentials(login, passcode)
    if login is None:
        login = os.environ.get("CHUTE_LOGIN")
    if passcode is None:
        passcode = os.environ.get("CHUTE_PASSCODE")
    return chute.connect(
        args.url,
        login=login,
        passcode=passcode,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )


def _send(args: argparse.Namespace) -> int:
    from_stdin = args.body is None or args.body == "-"
    # text when given as an argument, as chute dropbox send does; bytes from stdin
    body: bytes | str = sys.stdin.buffer.read() if from_stdin else args.body
    fields = message_fields(args)
    with _connect(args) as conn, conn.session() as session:
        session.send(args.destination, body, persistent=not args.non_persistent, **fields)
    return 0


def _receive(args: argparse.Namespace) -> int:
    with _connect(args) as conn, conn.session(ack="client") as session:
        prefetch = max(1, min(args.count or 100, 100))
        last = stream_end(conn, args.destination, args.offset)  # before the reader starts
        consumer = session.consumer(
            args.destination, selector=args.selector, prefetch=prefetch, offset=args.offset
        )
        progress = Progress(sys.stderr, args.destination, args.count) if args.count > 1 else None
        return print_received(
            consumer, args.count, args.timeout, args.json, progress=progress, last=last
        )


def _browse(args: argparse.Namespace) -> int:
    """Streams: one page or two in memory whatever the queue's depth."""
    with _connect(args) as conn, conn.session() as session:
        progress = Progress(sys.stderr, args.destination, 0)
        if progress.shown:  # the depth when the walk begins
            found = conn.stat(args.destination)["destinations"]
            depth = found[0]["depth"] if found else 0
            progress.total = min(depth, args.limit) if args.limit > 0 else depth
        same_terminal = progress.shown and sys.stdout.isatty()
        messages = session.iter_browse(args.destination, selector=args.selector)
        if args.limit > 0:
            messages = itertools.islice(messages, args.limit)
        for message in messages:
            if same_terminal:
                progress.clear()
            print_message(message, args.json, flush=False)
            progress.advance()
        sys.stdout.flush()
        progress.close()
    return 0


def _purge(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        count = conn.purge(args.destination)
    if args.json:
        print(json.dumps({"address": args.destination, "purged": count}))
    else:
        print(f"purged {args.destination}: {_messages(count)} removed")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        count = conn.delete(args.destination, force=args.force)
    if args.json:
        print(json.dumps({"address": args.destination, "deleted": count}))
    else:
        print(f"deleted {args.destination}: {_messages(count)} discarded")
    return 0


def _messages(count: int) -> str:
    return f"{count} message" if count == 1 else f"{count} messages"


def _stat(args: argparse.Namespace) -> int:
    if isinstance(args.watch, str):  # chute stat --watch queue:x: the pattern, not seconds
        if args.pattern is not None:
            raise UsageError(f"--watch takes a number of seconds, not {args.watch!r}")
        args.pattern, args.watch = args.watch, 2.0
    if args.count and args.watch is None:
        raise UsageError("--count counts the draws of --watch: give --watch too")
    try:
        conn = _connect(args)
    except NotLive:  # a backup: it answers its own statistics, not the broker's
        from chute.client.backup_stat import backup_stats  # noqa: PLC0415
        from chute.client.url import parse_url  # noqa: PLC0415

        stats = backup_stats(parse_url(args.url), timeout=10.0)  # chute.connect's
        sys.stdout.write(json_text(stats, indent=2) + "\n" if args.json else backup_text(stats))
        return 0
    with conn:
        if args.watch is not None:
            with ctrl_c_between_draws() as sleep:
                watch(
                    lambda: conn.stat(args.pattern),
                    sys.stdout,
                    every=args.watch,
                    count=args.count or 0,
                    as_json=args.json,
                    sleep=sleep,
                )
            return 0
        stats = conn.stat(args.pattern)
    if args.json:
        print(json_text(stats, indent=2))
    else:
        sys.stdout.write(render(stats))
    return 0


def _interval_or_pattern(text: str) -> float | str:
    """``--watch``'s value: seconds, or (not a number) the pattern that followed it."""
    try:
        float(text)
    except ValueError:
        return text
    return _interval(text)


def _interval(text: str) -> float:
    value = seconds(text)
    if value < 0.1:  # the shortest interval worth a redraw
        raise argparse.ArgumentTypeError(f"must be at least 0.1 seconds, not {text}")
    return value


def _tx(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.xid:
        raise ConfigError(f"chute tx {args.action} needs a transaction id (see chute tx list)")
    with _connect(args) as conn:
        if args.action == "list":
            _print_xids(conn.prepared(), args.json)
        elif args.action == "commit":
            conn.commit_prepared(args.xid)
        else:
            conn.rollback_prepared(args.xid)
    return 0


def _print_xids(xids: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"prepared": xids}))
        return
    for xid in xids:
        print(xid)


def _passwd(args: argparse.Namespace) -> int:
    import getpass  # noqa: PLC0415 - only this command needs it

    from chute.passwords import hash_password  # noqa: PLC0415

    if args.stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        if not _has_terminal():  # getpass would read standard input, echoing, or fail
            raise UsageError(
                "no terminal to ask for the password on: give it on standard input with "
                "--stdin (chute passwd --stdin < FILE)"
            )
        try:
            password = getpass.getpass("password: ")
            if getpass.getpass("again: ") != password:
                raise ConfigError("the two passwords differ; nothing printed")
        except EOFError:  # Ctrl-D at the prompt
            raise ConfigError("no password given; nothing printed") from None
    if not password:
        raise ConfigError("an empty password logs nobody in; nothing printed")
    print(hash_password(password))
    return 0


def _has_terminal() -> bool:
    """This process has a controlling terminal (what getpass asks on)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True
