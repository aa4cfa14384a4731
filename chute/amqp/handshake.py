"""What the broker says at ``connection.start`` (its properties, capabilities and
mechanisms) and how it reads a ``start-ok``'s credentials (``PLAIN``, ``AMQPLAIN``).

Pure: no sockets.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import commands, decode

from chute.version import __version__

CAPABILITIES: Final = {
    "publisher_confirms": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "exchange_exchange_bindings": False,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
"""What the broker announces; ``connection.blocked`` is sent to clients that announce it
too."""


def start(external: bool) -> commands.Connection.Start:
    """The ``connection.start`` of a connection (``EXTERNAL`` too with a verified TLS
    client certificate)."""
    mechanisms = "PLAIN AMQPLAIN" + (" EXTERNAL" if external else "")
    return commands.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties={
            "product": "chute",
            "version": __version__,
            "platform": "Python",
            "capabilities": dict(CAPABILITIES),
        },
        mechanisms=mechanisms,
        locales="en_US",
    )


def credentials(mechanism: str, response: Any) -> tuple[str | None, str | None]:
    """The login and password of a ``start-ok`` (None, None: EXTERNAL or unreadable)."""
    raw = response.encode() if isinstance(response, str) else bytes(response or b"")
    if mechanism == "PLAIN":
        parts = raw.split(b"\0")
        if len(parts) == 3:
            return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        return None, None
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
        except (ValueError, TypeError, IndexError, KeyError, struct.error):
            return None, None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        return (
            None if login is None else str(login),
            None if password is None else str(password),
        )
    return None, None
