"""Password hashes for the configuration's users: argon2id, through argon2-cffi.

``chute passwd`` prints :func:`hash_password`'s result for a ``[users.NAME]``
table's ``password``. A stored value that is not an argon2 hash is a plain-text
password, which the configuration accepts on loopback only (for trying things
out) and :func:`verify` compares in constant time.

Hashing and verifying cost tens of milliseconds by design (argon2's default
parameters: 64 MiB, 3 passes), so :class:`chute.core.rules.access.Access` remembers a
password it verified rather than verifying it on every login.
"""

from __future__ import annotations

import functools
import hmac
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER: Final = PasswordHasher()
HASH_PREFIX: Final = "$argon2"


def hash_password(password: str) -> str:
    """A salted argon2id hash of ``password``, as the configuration stores it."""
    return _HASHER.hash(password)


def is_hash(stored: str) -> bool:
    """``stored`` is an argon2 hash (else it is a plain-text password)."""
    return stored.startswith(HASH_PREFIX)


def check_hash(stored: str) -> None:
    """Raises ValueError if ``stored`` looks like an argon2 hash but is not a valid one."""
    try:
        _HASHER.check_needs_rehash(stored)
    except (InvalidHashError, ValueError) as exc:
        raise ValueError(f"not a valid argon2 hash ({exc})") from None


def verify(stored: str, given: str) -> bool:
    """``given`` matches ``stored`` (a hash, or a plain-text password compared in
    constant time)."""
    if is_hash(stored):
        try:
            return _HASHER.verify(stored, given)
        except (VerificationError, InvalidHashError):
            return False
    return hmac.compare_digest(stored.encode(), given.encode())


@functools.cache
def dummy_hash() -> str:
    """A hash to verify against for an unknown user, so that a refusal takes as long
    either way (made on first use: hashing is slow)."""
    return hash_password("not the password of anyone")
