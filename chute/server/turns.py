"""Turns: how long one connection acts on its input before the others get the loop.

uvloop reads up to 32 times 256 KiB from a socket in one go, and a driver would act
on all of it before the loop served anyone else: a client sending as fast as it can
made every other client wait ~100 ms per request. So a connection acts on its input
in turns (:meth:`chute.server.stream.StreamConnection._may_act`):

- a turn always acts on its first unit of input (every turn makes progress); a
  unit is a packet or a frame, or a step of a browse page
  (:func:`chute.core.operations.browse.page_in_steps`);
- every :data:`TURN_LOOK` it asks whether anyone else wants the loop
  (:meth:`Contenders.waiting`): a client that waits for answers with input on its
  socket, a sync asked for by another connection that the loop starts only once
  its ready callbacks ran, or an answer from the store's writer thread waiting to
  hop onto the loop (a sync done). If so, the turn ends there;
- a turn ends after :data:`TURN_S` in any case (timers, and clients whose input
  is no contender, get the loop too).

So a flood yields within ~50 µs to a client with a request, and when nobody else
waits it acts for whole milliseconds at a time: a loop iteration costs a write per
connection with output, so short turns for nobody's sake would cost throughput.

Which clients wait for answers: those that asked for one (a native request with a
correlation id, a STOMP receipt, every Simple-message-queue send, a login) within
the last :data:`ASKING_S`. Only their sockets are watched. A consumer's credit and
acks, one-way sends, are read in the loop's next iteration as before: were they
contenders, a producer feeding four consumers that keep up (each answers every
write with credit) would yield every ~0.15 ms and deliver in smaller writes, at
half the rate.

A connection waiting for its next turn reads on only while it buffers at most
:data:`TURN_BUFFER`; the rest stays in the network.
"""

from __future__ import annotations

import contextlib
import select
from collections import deque
from typing import Final

TURN_S: Final = 0.001
"""The longest a connection acts on its input before the others get their turn (seconds)."""
TURN_LOOK: Final = 0.00005
"""How often a turn asks whether anyone else wants the loop (seconds)."""
ASKING_S: Final = 0.25
"""A connection that asked for an answer this recently is a contender (seconds)."""
TURN_BUFFER: Final = 256 << 10
"""Input a connection waiting for its next turn may buffer before it stops reading."""


class Contenders:
    """Who else wants the loop: the sockets of the connections that read and have no
    turn scheduled yet (in a poll set of our own, asked without blocking), and the
    answers on their way from the store's writer thread.

    A socket is watched while its connection reads (:meth:`watch`), and not while it
    is paused or already has its next turn scheduled (:meth:`unwatch`): those do not
    need the acting connection to yield. Lives on the server's event loop, except
    :meth:`hop_coming`, which the writer thread calls.
    """

    def __init__(self) -> None:
        epoll = getattr(select, "epoll", None)
        self._poll: select.epoll | select.poll | None
        if epoll is not None:
            self._poll = epoll()
        elif hasattr(select, "poll"):
            self._poll = select.poll()
        else:  # no poll here: turns end after TURN_S only
            self._poll = None
        self._watched: set[int] = set()
        self._hops: deque[None] = deque()  # append and popleft are safe across threads
        self._syncing: set[int] = set()  # sockets of connections waiting for a sync's start

    def watch(self, fd: int) -> None:
        """``fd``'s input may make the connection acting now yield."""
        if self._poll is None or fd in self._watched:
            return
        try:
            self._poll.register(fd, select.POLLIN)
        except FileExistsError:  # a closed socket's number, taken by a new one
            self._poll.modify(fd, select.POLLIN)
        except (OSError, ValueError):
            return  # closed meanwhile: nothing to watch
        self._watched.add(fd)

    def unwatch(self, fd: int) -> None:
        if fd not in self._watched:
            return
        self._watched.discard(fd)
        if self._poll is not None:
            with contextlib.suppress(OSError, KeyError, ValueError):
                self._poll.unregister(fd)

    def hop_coming(self) -> None:
        """An answer will hop onto the loop (called on the thread that sends it)."""
        self._hops.append(None)

    def hop_arrived(self) -> None:
        """The answer :meth:`hop_coming` announced runs on the loop now."""
        with contextlib.suppress(IndexError):
            self._hops.popleft()

    def sync_asked(self, fd: int) -> None:
        """The connection with socket ``fd`` waits for a sync the loop will start once
        its ready callbacks ran (the server gathers the requests of one iteration)."""
        self._syncing.add(fd)

    def sync_started(self) -> None:
        """Every sync asked for so far has started."""
        self._syncing.clear()

    def due(self, own: int) -> bool:
        """Whether work the loop runs in this very iteration waits: another connection's
        sync to start, or a sync's answers. A connection whose turn comes now lets it go
        first (it comes back in the next iteration, once that work is done)."""
        if self._hops:
            return True
        syncing = self._syncing
        return bool(syncing) and (len(syncing) > 1 or own not in syncing)

    def waiting(self, own: int) -> bool:
        """Whether anyone but the connection with socket ``own`` wants the loop now."""
        if self._hops:
            return True
        syncing = self._syncing
        if syncing and (len(syncing) > 1 or own not in syncing):
            return True
        watched = self._watched
        if self._poll is None or not watched or (len(watched) == 1 and own in watched):
            return False  # nobody else to ask about: no system call
        return any(fd != own for fd, _ in self._poll.poll(0))

    def close(self) -> None:
        """Close the poll set; from now on only :data:`TURN_S` ends a turn."""
        poll, self._poll = self._poll, None
        self._watched.clear()
        if isinstance(poll, select.epoll):
            poll.close()
