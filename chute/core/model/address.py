"""Destination addresses: ``queue:NAME``, ``topic:NAME``, ``stream:NAME`` and the rules
for NAME.

A bare ``NAME`` means ``queue:NAME``; STOMP's ``/queue/NAME``, ``/topic/NAME``
and ``/stream/NAME`` map the same way. A name is 1-200 characters of letters,
digits, ``.``, ``-``, ``_`` and ``:``, so it can never be a path.

Reserved name prefixes (documented in docs/addresses.md):
``__sys__`` for system queues, ``__tmp__.`` for temporary (session) queues and
``__user__.`` for login-name queues.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Final, NamedTuple

from chute.errors import InvalidAddress

MAX_NAME_LENGTH: Final = 200
_NAME_RE: Final = re.compile(r"[A-Za-z0-9._:\-]{1,200}")

DEAD_LETTER: Final = "queue:__sys__deadLetter"
EXPIRED: Final = "queue:__sys__expired"
TEMP_PREFIX: Final = "__tmp__."
USER_PREFIX: Final = "__user__."
PARTITION_MARK: Final = "#"
"""Between a stream's name and a partition's number: ``stream:orders#2``."""
MAX_PARTITIONS: Final = 1024
"""The most partitions a stream may have."""


class Kind(enum.Enum):
    QUEUE = "queue"
    TOPIC = "topic"
    STREAM = "stream"


class Address(NamedTuple):
    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"

    @property
    def is_queue(self) -> bool:
        return self.kind is Kind.QUEUE

    @property
    def is_temporary(self) -> bool:
        return self.kind is Kind.QUEUE and self.name.startswith(TEMP_PREFIX)

    @property
    def login(self) -> str | None:
        """The user of a login-name queue, or None for any other address."""
        if self.kind is Kind.QUEUE and self.name.startswith(USER_PREFIX):
            return self.name[len(USER_PREFIX) :]
        return None


def check_name(name: str) -> str:
    """Raises InvalidAddress unless ``name`` follows the naming rules."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        shown = name if isinstance(name, str) and len(name) <= 60 else f"{str(name)[:60]}..."
        raise InvalidAddress(
            f"invalid destination name {shown!r}: use 1-{MAX_NAME_LENGTH} characters of "
            "letters, digits, '.', '-', '_' or ':' (no '/' and no '..')"
        )
    return name


@lru_cache(maxsize=4096)
def parse(address: str) -> Address:
    """Parse ``queue:NAME``, ``topic:NAME``, ``stream:NAME``, their STOMP forms
    (``/queue/NAME``, ...) or a bare ``NAME``.

    Raises:
        InvalidAddress: the address does not follow the rules.
    """
    if not isinstance(address, str):
        raise InvalidAddress(f"address must be a string, not {type(address).__name__}")
    for prefix, kind in (
        ("queue:", Kind.QUEUE),
        ("topic:", Kind.TOPIC),
        ("stream:", Kind.STREAM),
        ("/queue/", Kind.QUEUE),
        ("/topic/", Kind.TOPIC),
        ("/stream/", Kind.STREAM),
    ):
        if address.startswith(prefix):
            name = address[len(prefix) :]
            if kind is Kind.STREAM and PARTITION_MARK in name:
                return Address(kind, _partition_name(name))
            return Address(kind, check_name(name))
    _check_prefix(address)
    return Address(Kind.QUEUE, check_name(address))


def _partition_name(text: str) -> str:
    """``NAME#N`` checked: partition 0 is the stream itself (``NAME``)."""
    name, _, number = text.partition(PARTITION_MARK)
    check_name(name)
    if not number.isdigit() or not number.isascii() or int(number) >= MAX_PARTITIONS:
        raise InvalidAddress(
            f"invalid stream partition {text[:60]!r}: write NAME#N with N a partition "
            f"number 0-{MAX_PARTITIONS - 1}"
        )
    partition = int(number)
    return name if partition == 0 else f"{name}{PARTITION_MARK}{partition}"


def split_partition(address: str) -> tuple[str, int]:
    """A canonical address as (the stream's address, its partition): ``stream:orders#2``
    is (``stream:orders``, 2); any address without a partition is itself and 0."""
    base, mark, number = address.partition(PARTITION_MARK)
    return (base, int(number)) if mark else (address, 0)


def partition_address(address: str, partition: int) -> str:
    """The address of ``partition`` of the stream at ``address`` (0: the stream itself)."""
    return address if partition == 0 else f"{address}{PARTITION_MARK}{partition}"


def _edits(a: str, b: str) -> int:
    """The Damerau-Levenshtein distance (optimal string alignment) of two short words."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, rows[-2][j - 2] + 1)
            row.append(cost)
        rows.append(row)
    return rows[-1][-1]


def _check_prefix(address: str) -> None:
    """Refuse a bare name whose part before a ``:`` looks like a mistyped kind: the kind
    in another case (``Topic:news``), its letters shuffled (``qeueu:orders``) or one
    edit away (``queu:x``, ``tpoic:x``). It would silently make a queue of that name."""
    head, sep, _ = address.partition(":")
    if not sep or not head.isalpha() or len(head) > 8:
        return
    word = head.lower()
    for kind in ("queue", "topic", "stream"):
        if sorted(word) == sorted(kind) or _edits(word, kind) <= 1:
            raise InvalidAddress(
                f"{address[:60]!r} looks like a mistyped {kind}: address: write "
                f"{kind}:NAME (a queue name may hold ':' only after other text, e.g. a.b:c)"
            )


def pattern_address(pattern: str) -> str:
    """An address pattern (``*`` for any characters) spelled as any address
    (``logs.*``, ``/topic/logs.*``) as ``kind:name``; used by the configuration's
    per-destination settings and by roles' grants."""
    for prefix, kind in (
        ("queue:", "queue:"),
        ("topic:", "topic:"),
        ("stream:", "stream:"),
        ("/queue/", "queue:"),
        ("/topic/", "topic:"),
        ("/stream/", "stream:"),
    ):
        if pattern.startswith(prefix):
            return kind + pattern[len(prefix) :]
    return f"queue:{pattern}"


def pattern_matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a canonical address matches ``pattern``: an address (itself alone), or
    an address pattern with ``*`` for any characters (see :func:`pattern_address`).

    Raises:
        InvalidAddress: a pattern without ``*`` that is not an address.
    """
    if "*" not in pattern:
        return canonical(pattern).__eq__
    match = re.compile(fnmatch.translate(pattern_address(pattern))).match
    return lambda address: match(address) is not None


def canonical(address: str) -> str:
    """The canonical text of an address (``queue:NAME``, ``topic:NAME`` or ``stream:NAME``)."""
    return str(parse(address))


def user_queue(login: str) -> str:
    """The address of ``login``'s login-name queue."""
    return f"queue:{check_name(USER_PREFIX + login)}"
