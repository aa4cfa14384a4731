"""Heart-beat negotiation (STOMP 1.1/1.2 §Heart-beating), pure arithmetic.

The CONNECT and CONNECTED frames each carry ``heart-beat: x,y``: ``x`` is the
smallest interval in ms at which the sender can send heart-beats (0: it
cannot), ``y`` the interval at which it wants to receive them (0: it does not
want any). A missing header means ``0,0``.
"""

from __future__ import annotations

from chute.errors import RemoteProtocolError


def parse(value: str | None) -> tuple[int, int]:
    """The ``(x, y)`` of a ``heart-beat`` header value; None (no header) is ``(0, 0)``.

    Raises:
        RemoteProtocolError: the value is not two non-negative integers ('bad-heart-beat').
    """
    if value is None:
        return (0, 0)
    parts = value.split(",")
    if len(parts) == 2:
        x, y = (part.strip() for part in parts)
        if x.isascii() and x.isdigit() and y.isascii() and y.isdigit():
            return (int(x), int(y))
    raise RemoteProtocolError(
        f"heart-beat {value[:40]!r} is not two comma-separated numbers of ms", "bad-heart-beat"
    )


def format_value(beat: tuple[int, int]) -> str:
    """The ``heart-beat`` header value for ``(x, y)``."""
    return f"{beat[0]},{beat[1]}"


def negotiate(client: tuple[int, int], server: tuple[int, int]) -> tuple[int, int]:
    """The server's ``(send_every_ms, expect_every_ms)``; 0 means none.

    ``client`` is the CONNECT frame's ``(cx, cy)``, ``server`` the CONNECTED
    frame's ``(sx, sy)``. Per §Heart-beating: the server sends every
    ``max(sx, cy)`` ms unless ``sx`` or ``cy`` is 0, and the client every
    ``max(cx, sy)`` ms unless ``cx`` or ``sy`` is 0. A client computes its own
    view as ``negotiate(server, client)``.

    The caller should allow a margin before declaring the peer dead, since
    heart-beats are only as punctual as the network (the spec leaves it open).
    """
    cx, cy = client
    sx, sy = server
    send_every = 0 if sx == 0 or cy == 0 else max(sx, cy)
    expect_every = 0 if cx == 0 or sy == 0 else max(cx, sy)
    return (send_every, expect_every)
