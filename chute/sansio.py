"""What every sans-IO codec shares: the answer "no whole unit yet".

chute's codecs (the native protocol's :mod:`chute.protocol.codec`, STOMP's
:mod:`chute.stomp.codec`, Simple-message-queue's :mod:`chute.smq.codec`) are
fed bytes with ``receive_data`` and asked for the next packet, frame or event.
When the bytes in hand hold no whole one they return a :class:`NeedData`
member instead, the same in every codec, so a driver reads them alike.
"""

from __future__ import annotations

import enum
from typing import Final


class NeedData(enum.Enum):
    """What a codec's ``next_…`` method returns when it has no whole unit."""

    NEED_DATA = "need-data"
    """Feed more bytes with ``receive_data``."""
    CLOSED = "closed"
    """The peer closed the stream between units: none will ever come."""


NEED_DATA: Final = NeedData.NEED_DATA
CLOSED: Final = NeedData.CLOSED
