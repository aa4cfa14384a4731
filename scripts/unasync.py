"""Write the blocking client from the asyncio client: one source, two clients.

The asyncio modules are the source. Each blocking module of :data:`PAIRS` is
made from its asyncio twin by a token rewrite, as httpcore's ``unasync`` does:
``async`` and ``await`` are dropped, and the names of :data:`NAMES` (async
dunders, ``AsyncIterator``, the asyncio link and its module, ...) become their
blocking twins, in code, strings and comments alike. The result is formatted
with ruff, so a dropped ``await`` leaves no odd line breaks. Where the two
clients really differ (threads or an event loop), the difference lives in the
hand-written transports (``link``/``aio_link``, ``channels``/``aio_channels``),
which both sides call by the same method names.

    python scripts/unasync.py          # rewrite the blocking modules
    python scripts/unasync.py --check  # exit 1 if one differs (make lint)

Written here rather than taken from PyPI's ``unasync``: that package maps only
names given as ``Async*`` prefixes and ``__a*__`` dunders and leaves strings
alone, while chute's pairs also rename modules (``aio_link`` -> ``link``) and
classes without an ``Async`` prefix, and their docstrings must read right on
both sides; a rewrite over :mod:`tokenize` is some hundred lines and needs no
new dependency.
"""

from __future__ import annotations

import difflib
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PAIRS: dict[str, str] = {
    "chute/client/aio_closing.py": "chute/client/closing.py",
    "chute/client/aio_confirm.py": "chute/client/confirm.py",
    "chute/client/aio_client.py": "chute/client/blocking.py",
    "chute/client/aio_consumer.py": "chute/client/consumer.py",
    "chute/client/aio_cursors.py": "chute/client/cursors.py",
    "chute/client/aio_nodes.py": "chute/client/nodes.py",
    "chute/client/aio_session.py": "chute/client/blocking_session.py",
    "chute/client/api_async.py": "chute/client/api_blocking.py",
}
"""Each asyncio source module and the blocking module written from it."""

NAMES: dict[str, str] = {
    # the language's async forms
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "StopAsyncIteration": "StopIteration",
    # chute's pairs: the transports and the modules written from each other
    "AsyncLink": "Link",
    "aio_link": "link",
    "AsyncConfirmWindow": "ConfirmWindow",
    "aio_confirm": "confirm",
    "AsyncClosedAtExit": "ClosedAtExit",
    "aio_closing": "closing",
    "aio_nodes": "nodes",
    "aio_session": "blocking_session",
    "aio_client": "blocking",
    "aio_consumer": "consumer",
    "aio_cursors": "cursors",
    "AioCursors": "Cursors",
    "AioConnection": "BlockingConnection",
    "AioSession": "BlockingSession",
    "AioConsumer": "BlockingConsumer",
    "open_connection": "connect",
    # the API each implements (chute.client.api)
    "AsyncConnection": "Connection",
    "AsyncSession": "Session",
    "AsyncConsumer": "Consumer",
    # words of the prose
    "asyncio client": "blocking client",
    "task": "thread",
    "tasks": "threads",
}
"""Whole words rewritten, in code, strings and comments."""

CODE: dict[str, str] = {"asyncio": "threading"}
"""Names rewritten in code alone (``asyncio.Lock`` -> ``threading.Lock``)."""

_WORD = re.compile(r"\b(" + "|".join(sorted(map(re.escape, NAMES), key=len, reverse=True)) + r")\b")

_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)  # Python 3.12 splits f-strings

HEADER = "# Written by scripts/unasync.py from {source}: edit that, then run the script.\n"


UNWRAP: dict[str, int] = {"Awaitable": 0, "Coroutine": 2}
"""Types that stand for their result: ``Awaitable[T]`` and ``Coroutine[Any, Any, T]``
become ``T`` (the number: the type arguments dropped before it)."""

_UNWRAP = re.compile(r"\b(" + "|".join(UNWRAP) + r")\[")


def _unwrap(text: str) -> str:
    """``text`` with each type of :data:`UNWRAP` replaced by its result type."""
    while match := _UNWRAP.search(text):
        depth, args, begin = 0, [], match.end()
        for index in range(match.end() - 1, len(text)):
            char = text[index]
            if char in "[(":
                depth += 1
            elif char in "])":
                depth -= 1
                if depth == 0:
                    break
            elif char == "," and depth == 1:
                args.append(text[begin:index])
                begin = index + 1
        args.append(text[begin:index])
        kept = ",".join(args[UNWRAP[match.group(1)] :]).strip()
        text = text[: match.start()] + kept + text[index + 1 :]
    return text


def _words(text: str) -> str:
    return _WORD.sub(lambda m: NAMES[m.group(1)], text)


def _name(name: str) -> str:
    return CODE.get(name) or NAMES.get(name, name)


def unasync(source: str, source_path: str) -> str:
    """The blocking twin of asyncio module text ``source`` (not yet formatted)."""
    source = _unwrap(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(row: int, col: int) -> int:
        return offsets[row - 1] + col

    edits: list[tuple[int, int, str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for index, tok in enumerate(tokens):
        start, end = at(*tok.start), at(*tok.end)
        if tok.type == tokenize.NAME and tok.string in {"async", "await"}:
            following = tokens[index + 1]
            edits.append((start, at(*following.start), ""))
        elif tok.type == tokenize.NAME:
            if _name(tok.string) != tok.string:
                edits.append((start, end, _name(tok.string)))
        elif tok.type in {tokenize.STRING, tokenize.COMMENT, _FSTRING_MIDDLE}:
            rewritten = _words(tok.string)
            if rewritten != tok.string:
                edits.append((start, end, rewritten))
    text = source
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return HEADER.format(source=source_path) + text


def _ruff(text: str, target: str) -> str:
    """``text`` with its imports sorted and formatted as ``ruff`` would leave ``target``."""
    ruff = [sys.executable, "-m", "ruff"]
    fixed = subprocess.run(  # noqa: S603 - ruff, on our own text
        [
            *ruff,
            "check",
            "--fix-only",
            "--fixable",
            "I,F401,RUF100",
            "--quiet",
            "--stdin-filename",
            target,
            "-",
        ],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    ).stdout
    return subprocess.run(  # noqa: S603 - ruff, on our own text
        [*ruff, "format", "--quiet", "--stdin-filename", target, "-"],
        input=fixed or text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout


def generate(source: str, target: str) -> str:
    """The text the blocking module ``target`` must have, from asyncio module ``source``."""
    return _ruff(unasync((ROOT / source).read_text(encoding="utf-8"), source), target)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = 0
    for source, target in PAIRS.items():
        wanted = generate(source, target)
        path = ROOT / target
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == wanted:
            continue
        if check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    target,
                    f"{target} (from {source})",
                )
            )
        else:
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {target} from {source}")
    if stale:
        print(
            f"{stale} blocking module(s) differ from their asyncio source: "
            "run python scripts/unasync.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
