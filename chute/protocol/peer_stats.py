"""The packets by which one node of a cluster asks another for its figures (version 3 on).

A node seeing the cluster (``chute stat``, the admin API, the console) asks each node
it is linked to with ``PeerStatsFetch``; the other answers ``PeerStatsPage``: the nodes
it is linked to, and one page of its destinations in address order, each with its
depth and consumers, and where the next page starts. The asking node asks for the next
page only once a page arrived (one page in flight per node and request: the flow
control), so a node with many thousands of destinations answers in pages no larger
than :data:`PAGE_BYTES` and never floods the link. Packet 82 is kept for this
exchange and unused.

Bytes::

    PeerStatsFetch  request u64 | after s16
    PeerStatsPage   request u64 | done u8 | links: count u32, s16 each
                    | destinations: count u32, then address s16 | depth u64 | consumers u32

``after`` is the last address the previous page covered ("" at the start); a page with
``done`` set is the last. Plain frozen data like every packet; their tags are
:class:`chute.protocol.packets.PacketType`'s and :mod:`chute.protocol.spec` registers
the codecs. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from chute.content import as_bool, malformed

PAGE_DESTINATIONS: Final = 1000
"""The most destinations one ``PeerStatsPage`` carries."""
PAGE_BYTES: Final = 256 * 1024
"""About the most bytes of destinations one ``PeerStatsPage`` carries (a page stops at
the first destination past it)."""

Figures = tuple[tuple[str, int, int], ...]
"""Destinations on the wire: (address, depth, consumers)."""

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_HEAD: Final = struct.Struct(">QB")  # request | done
_FETCH: Final = struct.Struct(">Q")
_ROW: Final = struct.Struct(">QI")  # depth | consumers
_LEAST_ROW: Final = _U16.size + _ROW.size


@dataclass(frozen=True, slots=True)
class PeerStatsFetch:
    """Node → node: request ``request``'s page of destinations after ``after``."""

    request: int
    after: str


@dataclass(frozen=True, slots=True)
class PeerStatsPage:
    """Node → node: the answer to request ``request``: the nodes the sender is linked
    to, and a page of its destinations; ``done``: the last page."""

    request: int
    done: bool
    links: tuple[str, ...]
    destinations: Figures


def _text(value: str) -> bytes:
    data = value.encode()
    return _U16.pack(len(data)) + data


def row_size(address: str) -> int:
    """The bytes one destination takes in a page."""
    return _LEAST_ROW + len(address.encode())


def encode_fetch(packet: PeerStatsFetch) -> tuple[int, int, bytes]:
    return 0, 0, _FETCH.pack(packet.request) + _text(packet.after)


def encode_page(packet: PeerStatsPage) -> tuple[int, int, bytes]:
    parts = [_HEAD.pack(packet.request, packet.done), _U32.pack(len(packet.links))]
    parts += [_text(name) for name in packet.links]
    parts.append(_U32.pack(len(packet.destinations)))
    parts += [_text(a) + _ROW.pack(depth, consumers) for a, depth, consumers in packet.destinations]
    return 0, 0, b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, st: struct.Struct) -> tuple[Any, ...]:
        if self.pos + st.size > len(self.data):
            raise malformed("a field overruns the packet")
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def text(self) -> str:
        (n,) = self.fixed(_U16)
        end = self.pos + n
        if end > len(self.data):
            raise malformed("string overruns the packet")
        value = self.data[self.pos : end].decode()
        self.pos = end
        return value

    def count(self, least: int) -> int:
        (n,) = self.fixed(_U32)
        if n * least > len(self.data) - self.pos:  # refuse absurd counts before reading
            raise malformed("list overruns the packet")
        return int(n)

    def end(self, name: str) -> None:
        if self.pos != len(self.data):
            raise malformed(f"trailing bytes in {name}")


def decode_fetch(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerStatsFetch:
    r = _Reader(data[start:end])
    (request,) = r.fixed(_FETCH)
    packet = PeerStatsFetch(request, r.text())
    r.end("PeerStatsFetch")
    return packet


def decode_page(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerStatsPage:
    r = _Reader(data[start:end])
    request, done = r.fixed(_HEAD)
    links = tuple(r.text() for _ in range(r.count(_U16.size)))
    rows = []
    for _ in range(r.count(_LEAST_ROW)):
        address = r.text()
        depth, consumers = r.fixed(_ROW)
        rows.append((address, depth, consumers))
    r.end("PeerStatsPage")
    return PeerStatsPage(request, as_bool(done), links, tuple(rows))
