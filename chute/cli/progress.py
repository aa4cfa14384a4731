"""A one-line progress bar for the ``chute`` commands, on a terminal only.

``chute browse`` of a deep queue prints for a while; on a terminal its standard
error shows how far it got::

    queue:orders  12,000 of 200,000 messages [##--------------------]   6%

Written by hand rather than with a library (tqdm, rich): it is one line,
redrawn in place at most ``rate`` times a second, and it is all the commands
need. A :class:`Progress` made for a stream that is not a terminal draws
nothing, so piped and redirected output carries no bar.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TextIO

_WIDTH: Final = 24  # characters of the bar itself
_CLEAR: Final = "\r\x1b[K"  # back to the line's start, erase to its end


class Progress:
    """``done`` of ``total`` on one redrawn line of ``stream`` (if it is a terminal)."""

    def __init__(
        self,
        stream: TextIO,
        label: str,
        total: int,
        *,
        rate: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        self.label = label
        self.total = total
        self.done = 0
        self._every = 1 / rate
        self._clock = clock
        self._drawn_at = -self._every
        self._drawn = False

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more; redraws if the last drawing is old enough."""
        self.done += count
        if self.shown and self._clock() - self._drawn_at >= self._every:
            self.draw()

    def draw(self) -> None:
        total = max(self.total, self.done)  # the queue may have grown since it was counted
        share = self.done / total if total else 1.0
        filled = round(share * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        self.stream.write(
            f"{_CLEAR}{self.label}  {self.done:,} of {total:,} messages [{bar}] {share:4.0%}"
        )
        self.stream.flush()
        self._drawn_at = self._clock()
        self._drawn = True

    def clear(self) -> None:
        """Erase the line (before other output goes to the same terminal)."""
        if self._drawn:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        """Draw the final count and end the line."""
        if self.shown:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
