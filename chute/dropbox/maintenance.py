"""Queue dropboxes kept from outside: a dead consumer's claims, purge, delete.

What an operator (``chute dropbox recover``, the dropbox client's purge and
delete) or a starting consumer does to a whole queue dropbox, rather than a
producer or consumer to one message (:mod:`chute.dropbox.queue`):

- **A dead consumer**: :func:`recover_client` moves what a client id left in
  ``processing/`` back to ``target/``. Run it only when that client is gone:
  it takes the files of a live consumer with that id just the same.
- **Purge and delete** (:func:`purge_queue`, :func:`delete_queue`): purging
  unlinks what waits in ``target/`` (claimed files stay with their consumers);
  deleting removes the queue's directory, claimed files too, and a consumer
  finds it gone at its next scan.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from chute.core.model.address import Kind, parse
from chute.dropbox.layout import QueueLayout, init_queue, queue_layout
from chute.dropbox.names import claim_room, split_claim_name
from chute.dropbox.queue import move_if_there
from chute.dropbox.transcoder import decode_filename
from chute.errors import InvalidAddress, InvalidMessage, NotFound

__all__ = ["delete_queue", "purge_queue", "recover_client", "recover_layout"]


def recover_client(root: str | os.PathLike[str], destination: str, client_id: str) -> list[str]:
    """Move every file ``client_id`` left in ``processing/`` back to ``target/``.

    The recovery command for a killed consumer: run it only when no consumer
    with this client id is alive. Each file's delivery count is raised (it may
    have been delivered), so its consumer sees it as redelivered. Returns the
    names put back into ``target/``.

    Raises:
        InvalidAddress: a bad destination name.
    """
    return recover_layout(init_queue(root, destination), client_id)


def recover_layout(layout: QueueLayout, client_id: str) -> list[str]:
    """:func:`recover_client` for any dropbox (a topic subscription's too)."""
    layout.create()
    restored: list[str] = []
    with os.scandir(layout.processing) as entries:
        claimed = [entry.name for entry in entries]
    for claimed_name in claimed:
        owner, name = split_claim_name(claimed_name)
        if owner != client_id:
            continue
        decoded = decode_filename(name)
        try:
            new_name = decoded.with_delivery_count(
                decoded.delivery_count + 1, claim_room=claim_room([client_id])
            )
        except InvalidMessage:
            new_name = name
        if move_if_there(layout.processing / claimed_name, layout.target / new_name):
            restored.append(new_name)
    return restored


def purge_queue(root: str | os.PathLike[str], address: str) -> int:
    """Remove every file waiting in a queue dropbox's ``target/`` (files claimed in
    ``processing/`` stay with their consumers); returns how many.

    Raises:
        InvalidAddress: a bad address, or a topic. NotFound: no such queue dropbox.
    """
    layout = _existing_queue(root, address, "purged")
    with os.scandir(layout.target) as entries:
        names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
    count = 0
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # claimed meanwhile
            os.unlink(layout.target / name)
            count += 1
    return count


def delete_queue(root: str | os.PathLike[str], address: str) -> int:
    """Delete a queue dropbox, its directory and every file in it; returns how many
    messages went (waiting in ``target/`` or claimed in ``processing/``).

    Raises:
        InvalidAddress: a bad address, or a topic. NotFound: no such queue dropbox.
    """
    layout = _existing_queue(root, address, "deleted")
    count = 0
    for directory in (layout.target, layout.processing):
        with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
            count += sum(1 for _ in entries)
    shutil.rmtree(layout.base.parent)
    return count


def _existing_queue(root: str | os.PathLike[str], address: str, done: str) -> QueueLayout:
    addr = parse(address)
    if addr.kind is not Kind.QUEUE:
        raise InvalidAddress(
            f"{addr}: a dropbox topic has no messages of its own to be {done}; its "
            "subscriptions are directories (unsubscribe them)"
        )
    layout = queue_layout(root, addr.name)
    if not layout.base.is_dir():
        raise NotFound(f"{addr} does not exist under {layout.root}")
    return layout
