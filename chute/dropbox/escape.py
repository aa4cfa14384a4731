"""The escaping of text in DropboxMQ names, both directions. Pure: no file I/O.

Every piece of text chute puts into a DropboxMQ name goes through :func:`enc`:
the fields and properties of a message filename
(:mod:`~chute.dropbox.transcoder`), and the client id of a claimed name or the
two parts of a subscription's directory (:mod:`~chute.dropbox.names`). It is
DropboxMQ 1.2's encoding: form-style URL encoding (space is ``+``; ``*``,
``-``, ``_`` kept), then ``.`` becomes ``%2E`` and ``~`` becomes ``%7E``. An
encoded text therefore holds only ``A-Z a-z 0-9 * - _ + %``: never ``.`` (the
separator of a filename's fields and of a subscription directory's parts),
never ``~`` (the separator of a claimed name), never ``/``.

:func:`dec` reads such text back as Java's ``URLDecoder`` does, and returns
None where Java would throw; :func:`dec_or_literal` keeps text that does not decode
as it is, noting it.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import quote_plus

from chute.errors import InvalidMessage

__all__ = ["dec", "enc"]


def enc(text: str) -> str:
    """DropboxMQ's field encoding: form-style URL encoding, then ``.`` and ``~`` escaped.

    Raises:
        InvalidMessage: the text holds a lone surrogate (it has no UTF-8 form).
    """
    try:
        quoted = quote_plus(text, safe="*")
    except UnicodeEncodeError:
        raise InvalidMessage(f"{text[:40]!r} is not valid Unicode (lone surrogate)") from None
    return quoted.replace(".", "%2E").replace("~", "%7E")


_ESCAPES: Final = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def dec(text: str) -> str | None:
    """Java's ``URLDecoder.decode(text, "UTF-8")``, or None where Java would throw.

    ``+`` is a space; runs of ``%XX`` are UTF-8. A ``%`` not followed by two hex
    digits, or escapes that are not UTF-8, give None (Java throws or substitutes).
    """
    if "%" not in text:
        return text.replace("+", " ")
    out: list[str] = []
    pos = 0
    for match in _ESCAPES.finditer(text):
        plain = text[pos : match.start()]
        if "%" in plain:
            return None
        out.append(plain.replace("+", " "))
        try:
            out.append(bytes.fromhex(match.group().replace("%", "")).decode("utf-8"))
        except UnicodeDecodeError:
            return None
        pos = match.end()
    rest = text[pos:]
    if "%" in rest:
        return None
    out.append(rest.replace("+", " "))
    return "".join(out)


def dec_or_literal(text: str, what: str, notes: list[str]) -> str:
    """``text`` URL-decoded, or as it is (noted in ``notes``, naming ``what``) when it
    does not decode: a name's field is never lost for a bad escape."""
    decoded = dec(text)
    if decoded is None:
        notes.append(f"{what} {text[:60]!r} does not URL-decode: kept literally")
        return text
    return decoded
