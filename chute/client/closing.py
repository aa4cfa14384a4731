# Written by scripts/unasync.py from chute/client/aio_closing.py: edit that, then run the script.
"""The base of a client's connection, session and consumer: what closes at the end of
the block it is entered by (the dropbox client's classes share the blocking one).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from chute.errors import ChuteError


class ClosedAtExit:
    """Closes at the end of the block it is entered by. With an exception on its way
    out, a failure to close (an unconfirmed send refused) becomes a note on that
    exception instead of replacing it."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def _described(self) -> str:
        """What a note on a failure to close calls this object."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except ChuteError as failure:
            exc.add_note(f"closing {self._described()} also failed: {failure}")
