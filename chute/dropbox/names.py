"""What a directory or a claimed file may be called in a DropboxMQ root. Pure: no file I/O.

Every rule about a name *around* a message lives here; the message's own
filename is :mod:`~chute.dropbox.transcoder`'s, and
:mod:`~chute.dropbox.layout` turns these names into checked paths.

- **Destinations** (:func:`check_destination_name`, :func:`destination_parts`):
  a queue ``orders`` is the directory ``orders/``; a topic ``a.b`` is
  ``topic-root/a/b/``. A destination name is never a path.
- **Claimed files** (:func:`claim_name`, :func:`split_claim_name`): a consumer
  claims a file by renaming it to ``<enc(clientId)>~<name>``, and keeps that
  name in ``processed/`` and ``error/``. DropboxMQ's consumer also puts a
  recovered or rolled-back file back into ``target/`` with its prefix, and
  operators re-drive ``error/`` files the same way, so a reader takes
  everything up to the first ``~`` of *any* name as a claim prefix, as
  DropboxMQ does. The client id encodes to 1 to :data:`MAX_CLIENT_ID_BYTES`
  bytes (:func:`check_client_id`); it never holds ``~`` once encoded, so the
  first ``~`` is the separator.
- **Subscription directories** (:func:`subscription_dir_name`,
  :func:`check_subscription_dir`): ``<enc(subscription)>.<enc(clientId)>``
  under a topic's ``.subscriptions/``.

Every name is at most :data:`NAME_MAX_BYTES`, the claimed name included (that
is DropboxMQ's only limit too). How much a claim adds depends on the client id
that makes it: :func:`claim_room`. A producer reserves room for the consumers
that will claim its file: a subscription's are named by its directory
(:func:`subscription_claim_room`); a queue's are the client ids it is told of,
or, when it knows none, :data:`DEFAULT_CLAIM_ROOM` (DropboxMQ's generated
client ids). ``enc`` is :func:`chute.dropbox.escape.enc`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from chute.core.model.address import check_name
from chute.dropbox.escape import dec, enc
from chute.errors import InvalidAddress, InvalidMessage

__all__ = [
    "DEFAULT_CLAIM_ROOM",
    "GENERATED_CLIENT_ID_BYTES",
    "MAX_CLIENT_ID_BYTES",
    "NAME_MAX_BYTES",
    "SHARED_CLIENT",
    "TOPIC_ROOT",
    "check_client_id",
    "check_destination_name",
    "check_subscription_dir",
    "claim_name",
    "claim_room",
    "destination_parts",
    "split_claim_name",
    "subscription_claim_room",
    "subscription_dir_name",
]

NAME_MAX_BYTES: Final = 255
"""The longest filename (in bytes) of ext4, XFS, btrfs, APFS, NTFS (in UTF-16 units)."""

MAX_CLIENT_ID_BYTES: Final = 48
"""The longest encoded client id :func:`claim_name` accepts."""

GENERATED_CLIENT_ID_BYTES: Final = 27
"""The length of the client id a DropboxMQ connection makes up when none is
configured: ``<ms * 1000 + sequence>-<10 random digits>``, like its message ids."""

DEFAULT_CLAIM_ROOM: Final = GENERATED_CLIENT_ID_BYTES + 1
"""What a claim by a DropboxMQ connection with a generated client id adds to a name."""

SHARED_CLIENT: Final = "__shared__"
"""The client part of a shared subscription's directory (``<sub>.__shared__``): consumers
of any client id compete on it."""

TOPIC_ROOT: Final = "topic-root"
"""The directory under the root that holds every topic."""


# -- claimed files -------------------------------------------------------------------------


def check_client_id(client_id: str) -> str:
    """``client_id`` as it prefixes a claimed name (``enc(client_id)``), checked.

    Every client id chute accepts (a consumer's, a ``dropbox:`` URL's, a
    mount's) passes here, so a claimed name can always be made from it.

    Raises:
        InvalidAddress: the client id is empty, holds a lone surrogate, or
            encodes to more than :data:`MAX_CLIENT_ID_BYTES`.
    """
    try:
        encoded = enc(client_id)
    except InvalidMessage as exc:
        raise InvalidAddress(f"client id: {exc.reason}") from None
    if not encoded:
        raise InvalidAddress("client id must not be empty")
    if len(encoded) > MAX_CLIENT_ID_BYTES:
        raise InvalidAddress(
            f"client id {client_id[:60]!r} is longer than {MAX_CLIENT_ID_BYTES} bytes "
            "once URL-encoded"
        )
    return encoded


def claim_room(client_ids: Iterable[str]) -> int:
    """How many bytes the longest claim prefix ``<enc(clientId)>~`` of ``client_ids`` adds.

    :data:`DEFAULT_CLAIM_ROOM` when ``client_ids`` is empty (no claimant is known).

    Raises:
        InvalidAddress: a bad client id (see :func:`check_client_id`).
    """
    return max((len(check_client_id(c)) + 1 for c in client_ids), default=DEFAULT_CLAIM_ROOM)


def claim_name(client_id: str, name: str) -> str:
    """The name a consumer gives a file it claims: ``<enc(clientId)>~<name>``.

    A claim prefix ``name`` already has (a file put back into ``target/`` by
    another consumer) is replaced, not stacked: a reader drops only up to the
    first ``~``.

    Raises:
        InvalidAddress: a bad client id (see :func:`check_client_id`), or the
            result would exceed :data:`NAME_MAX_BYTES`.
    """
    _, unclaimed = split_claim_name(name)
    claimed = f"{check_client_id(client_id)}~{unclaimed}"
    size = len(claimed.encode("utf-8", "surrogateescape"))
    if size > NAME_MAX_BYTES:
        raise InvalidAddress(
            f"claimed by {client_id[:60]!r} the name would be {size} bytes, over the "
            f"filesystem's {NAME_MAX_BYTES}"
        )
    return claimed


def split_claim_name(name: str) -> tuple[str | None, str]:
    """(client id, unclaimed name): DropboxMQ's reading of any name in a dropbox.

    Everything up to the first ``~`` is a claim prefix, whichever directory the
    file is in. The client id is None when there is no ``~`` or nothing before
    it. The encoded client id never holds ``~`` (it is escaped), so the first
    ``~`` is the separator even when the rest holds more.
    """
    encoded, sep, unclaimed = name.partition("~")
    if not sep:
        return None, name
    if not encoded:
        return None, unclaimed
    client = dec(encoded)
    return (encoded if client is None else client), unclaimed


# -- subscription directories --------------------------------------------------------------


def subscription_dir_name(subscription: str, client_id: str) -> str:
    """A topic subscription's directory: ``<enc(subscription)>.<enc(clientId)>``.

    Raises:
        InvalidAddress: either part is empty or the name would be too long.
    """
    if not subscription or not client_id:
        raise InvalidAddress("subscription name and client id must not be empty")
    try:
        name = f"{enc(subscription)}.{enc(client_id)}"
    except InvalidMessage as exc:
        raise InvalidAddress(exc.reason) from None
    if len(name) > NAME_MAX_BYTES:
        raise InvalidAddress(f"subscription directory name would exceed {NAME_MAX_BYTES} bytes")
    return name


def subscription_claim_room(dir_name: str) -> int:
    """What a claim by the consumers of the subscription ``dir_name`` adds to a name.

    The directory ``<enc(subscription)>.<enc(clientId)>`` names the client that
    claims its files, and the claim prefix is ``<enc(clientId)>~``: exactly
    ``len(enc(clientId)) + 1``. A shared subscription (:data:`SHARED_CLIENT`) is
    claimed by consumers of any client id: room for the longest one
    (:data:`MAX_CLIENT_ID_BYTES`). A directory not named that way (no ``.``):
    :data:`DEFAULT_CLAIM_ROOM`.
    """
    _, dot, client = dir_name.partition(".")  # enc() escapes a '.' in the subscription
    if not dot or not client:
        return DEFAULT_CLAIM_ROOM
    if client == SHARED_CLIENT:
        return MAX_CLIENT_ID_BYTES + 1
    return len(client.encode("utf-8", "surrogateescape")) + 1


def check_subscription_dir(dir_name: str) -> str:
    """Raise unless ``dir_name``, found under ``.subscriptions/``, is one directory.

    Any name is followed (a DropboxMQ client may have made it), so long as it
    is not a path.

    Raises:
        InvalidAddress: empty, ``.``, ``..``, or holding ``/``, ``\\`` or NUL.
    """
    if dir_name in ("", ".", "..") or "/" in dir_name or "\\" in dir_name or "\0" in dir_name:
        raise InvalidAddress(f"{dir_name!r} is not a subscription directory name")
    return dir_name


# -- destinations --------------------------------------------------------------------------


def check_destination_name(name: str, *, topic: bool = False) -> str:
    """Raise unless ``name`` can name a dropbox directory under the root.

    A destination name is never a path. On top of chute's naming rules (letters,
    digits, ``.``, ``-``, ``_``, ``:``; no ``/``, ``\\``, NUL or ``..``; at most
    200 characters), a dropbox name must not start or end with ``.`` (hidden
    files, ``.incoming``/``.subscriptions``, and Windows trims a trailing dot),
    and a queue must not be called ``topic-root`` in any letter case (the topic
    tree lives there). A topic ``a.b`` becomes the directories ``a/b``.

    Raises:
        InvalidAddress: the name would not stay one directory (or topic tree)
            inside the root.
    """
    check_name(name)
    if name.startswith(".") or name.endswith("."):
        raise InvalidAddress(f"dropbox name {name!r} must not start or end with '.'")
    if not topic and name.lower() == TOPIC_ROOT:
        raise InvalidAddress(f"a queue cannot be called {TOPIC_ROOT!r}: topics live there")
    return name


def destination_parts(name: str, *, topic: bool = False) -> tuple[str, ...]:
    """The directories of a destination's dropbox, relative to the root.

    ``orders`` gives ``("orders",)``; the topic ``a.b`` gives
    ``("topic-root", "a", "b")``.

    Raises:
        InvalidAddress: as :func:`check_destination_name`.
    """
    check_destination_name(name, topic=topic)
    if topic:
        return (TOPIC_ROOT, *name.split("."))
    return (name,)
