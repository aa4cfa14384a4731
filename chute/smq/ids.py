"""Between chute's message ids (text) and Simple-message-queue's (16 bytes).

chute generates ids as 32 hex characters of 16 time-ordered bytes
(:func:`chute.message.new_message_id`), so a Simple-message-queue id round-trips exactly:
it becomes its lower-case hex text, and that text becomes the same 16 bytes.
An id of any other shape (a native or STOMP producer may choose its own) has
no 16-byte form; a sink gets its BLAKE2b digest of 16 bytes (``digest_size=16``,
BLAKE2b-128: not a cut of the 64-byte digest), the same for the same id every time.
"""

from __future__ import annotations

import hashlib
import string
from typing import Final

from chute.smq.events import ID_SIZE

_HEX: Final = frozenset(string.hexdigits)


def to_message_id(wire: bytes) -> str:
    """The chute message id of a Simple-message-queue id: its 32 lower-case hex characters."""
    if len(wire) != ID_SIZE:
        raise ValueError(f"a Simple-message-queue id is {ID_SIZE} bytes, not {len(wire)}")
    return wire.hex()


def to_wire_id(message_id: str) -> bytes:
    """The 16 bytes a sink is given for the chute message id ``message_id``."""
    if len(message_id) == 2 * ID_SIZE and _HEX.issuperset(message_id):
        return bytes.fromhex(message_id)
    return hashlib.blake2b(
        message_id.encode("utf-8", "surrogatepass"), digest_size=ID_SIZE
    ).digest()
