"""The native protocol's packets between the nodes of a cluster (version 3 on).

A node dials another as a client would (``Connect``, with the cluster's user), then
opens the link with ``PeerOpen`` (answered ``Ok`` with the other node's name); from
then on both sides send, one-way and in order, the six words of
:mod:`chute.core.model.cluster`: ``PeerResume`` first, then ``PeerHandover``,
``PeerConfirm``, ``PeerRefuse``, ``PeerRelease`` and ``PeerDemand``. A hand-over's key
is ``(run, n)``; a list of keys travels as ``count u32``, then ``s16 run | u64 n`` each.
``PeerHandovers`` carries several hand-overs of one run in one packet (what a node hands
over in one turn of its loop, received and stored as one); ``PeerHandover`` carries one.

Bytes::

    PeerHandover  run s16 | n u64 | address s16 | delivery_count u32 | redelivered u8
                  | timestamp i64 | expiration i64 | content (to the end)
    PeerHandovers run s16 | count u32, then per hand-over: n u64 | address s16
                  | delivery_count u32 | redelivered u8 | timestamp i64 | expiration i64
                  | size u32 | content (size bytes)
    PeerResume    keys | count u32, then per demand: address s16 | selectors
    PeerDemand    address s16 | selectors
    selectors     count u32, then o32 each (absent: a consumer without a selector)

Plain frozen data like every packet; their tags are
:class:`chute.protocol.packets.PacketType`'s, and :mod:`chute.protocol.spec` registers
the codecs below (the others are spec lists). Pure.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, NamedTuple

from chute.content import as_bool, decode_content, encode_content, malformed
from chute.core.model.cluster import Handover, HandoverKey
from chute.message import Message

Keys = tuple[tuple[str, int], ...]
"""Hand-over keys on the wire: (run, n) pairs."""
Selectors = tuple[str | None, ...]

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U8: Final = struct.Struct(">B")
_N: Final = struct.Struct(">Q")
_HANDOVER: Final = struct.Struct(">QIBqq")  # n | delivery_count | redelivered | ts | exp
_KEY_HEAD: Final = struct.Struct(">QH")  # n | the address's length
_FIELDS: Final = struct.Struct(">IBqqI")  # delivery_count | redelivered | ts | exp | size


@functools.lru_cache(maxsize=16)
def _item_head(length: int) -> struct.Struct:
    """The head of one hand-over of a PeerHandovers whose address is ``length`` bytes long:
    n u64 | address s16 | delivery_count u32 | redelivered u8 | ts i64 | exp i64 | size u32."""
    return struct.Struct(f">QH{length}sIBqqI")


@dataclass(frozen=True, slots=True)
class PeerOpen:
    """Node → node, after Connect: this connection is the link of node ``node`` of cluster
    ``cluster``; answered Ok with the answering node's name (or an Error: refused)."""

    cluster: str
    node: str


class PeerHandover(NamedTuple):
    """A message handed over to queue ``address`` of the receiving node (a named tuple,
    frozen as a packet is: one is made on each side of every hand-over, at C speed)."""

    run: str
    n: int
    address: str
    delivery_count: int
    redelivered: bool
    message: Message


@dataclass(frozen=True, slots=True)
class PeerHandovers:
    """Several hand-overs of run ``run``, in order: the cluster's own
    :class:`~chute.core.model.cluster.Handover` tuples (each key of run ``run``), made and
    taken as they are, with no packet object per hand-over on either side."""

    run: str
    handovers: tuple[Handover, ...]


@dataclass(frozen=True, slots=True)
class PeerConfirm:
    """The hand-overs ``keys`` are stored (durably) on the sending node."""

    keys: Keys


@dataclass(frozen=True, slots=True)
class PeerRefuse:
    """The hand-overs ``keys`` were not taken (their queue is full)."""

    keys: Keys


@dataclass(frozen=True, slots=True)
class PeerRelease:
    """The sender removed its copies of ``keys`` for good."""

    keys: Keys


@dataclass(frozen=True, slots=True)
class PeerDemand:
    """Queue or topic ``address`` on the sending node has consumers with ``selectors``."""

    address: str
    selectors: Selectors


@dataclass(frozen=True, slots=True)
class PeerResume:
    """First on a link that came up: the keys the sender may still hand over again, and
    everything it wants, as ``(address, selectors)`` pairs."""

    keys: Keys
    demands: tuple[tuple[str, Selectors], ...]


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def fixed(self, st: struct.Struct) -> Any:
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values[0] if len(values) == 1 else values

    def text(self, st: struct.Struct = _U16) -> str:
        n = self.fixed(st)
        end = self.pos + n
        if end > len(self.data):
            raise malformed("string overruns the packet")
        value = self.data[self.pos : end].decode()
        self.pos = end
        return value

    def count(self, least: int) -> int:
        n: int = self.fixed(_U32)
        if n * least > len(self.data) - self.pos:  # refuse absurd counts before reading
            raise malformed("list overruns the packet")
        return n

    def keys(self) -> Keys:
        count = self.count(10)
        data, pos, size = self.data, self.pos, len(self.data)
        if count and pos + 2 <= size:  # mostly every key of one run: records of one size
            (length,) = _U16.unpack_from(data, pos)
            stop = pos + count * (2 + length + 8)
            if stop <= size:
                # every record in one unpack (run with its length, n, run, n, ...): the
                # keys of one run if each run equals the first
                flat = struct.unpack(_records_format(2 + length, count), data[pos:stop])
                heads = flat[0::2]
                if heads.count(heads[0]) == count:
                    self.pos = stop
                    return tuple(zip(repeat(heads[0][2:].decode()), flat[1::2]))
        unpack_len, unpack_n = _U16.unpack_from, _N.unpack_from
        runs: dict[bytes, str] = {}  # runs of several lengths
        out: list[tuple[str, int]] = []
        for _ in range(count):
            if pos + 2 > size:
                raise malformed("a key overruns the packet")
            (length,) = unpack_len(data, pos)
            stop = pos + 2 + length
            if stop + 8 > size:
                raise malformed("a key overruns the packet")
            raw = data[pos + 2 : stop]
            run = runs.get(raw)
            if run is None:
                run = runs[raw] = raw.decode()
            (n,) = unpack_n(data, stop)
            out.append((run, n))
            pos = stop + 8
        self.pos = pos
        return tuple(out)

    def selectors(self) -> Selectors:
        out: list[str | None] = []
        for _ in range(self.count(1)):
            out.append(self.text(_U32) if as_bool(self.fixed(_U8)) else None)
        return tuple(out)

    def end(self, name: str) -> None:
        if self.pos != len(self.data):
            raise malformed(f"trailing bytes in {name}")


def _text(value: str, st: struct.Struct = _U16) -> bytes:
    data = value.encode()
    return st.pack(len(data)) + data


def _records_format(head: int, count: int) -> str:
    """``count`` key records whose run, with its length, is ``head`` bytes: s16 run | u64 n
    each, as one struct format (``struct`` keeps the formats it used last compiled)."""
    return f">{f'{head}sQ' * count}"


def _keys(keys: Keys) -> bytes:
    count = _U32.pack(len(keys))
    if not keys:
        return count
    runs, numbers = zip(*keys, strict=True)
    if runs.count(runs[0]) == len(runs):  # mostly every key of one run: packed in one call
        only = _text(runs[0])
        fields: list[bytes | int] = [only] * (2 * len(keys))
        fields[1::2] = numbers
        return count + struct.pack(_records_format(len(only), len(keys)), *fields)
    heads: dict[str, bytes] = {}
    parts = [count]
    pack_n = _N.pack
    for run, n in keys:
        head = heads.get(run)
        if head is None:
            head = heads[run] = _text(run)
        parts += (head, pack_n(n))
    return b"".join(parts)


def _selectors(selectors: Selectors) -> bytes:
    parts = [_U32.pack(len(selectors))]
    for s in selectors:
        parts.append(b"\x00" if s is None else b"\x01" + _text(s, _U32))
    return b"".join(parts)


def encode_handover(packet: PeerHandover) -> tuple[int, int, bytes]:
    m = packet.message
    content = m.encoded if m.encoded is not None else encode_content(m)
    head = _HANDOVER.pack(
        packet.n, packet.delivery_count, packet.redelivered, m.timestamp, m.expiration
    )
    return 0, 0, _text(packet.run) + _text(packet.address) + head + content


def decode_handover(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerHandover:
    data = data[start:end]
    r = _Reader(data, 0)
    run = r.text()
    address = r.text()
    n, count, redelivered, ts, exp = r.fixed(_HANDOVER)
    content = data[r.pos :]
    message = decode_content(content, 0, len(content), max_properties, ts, exp)
    message.encoded = content  # the splice: the Deliver (or hand-over) reuses these bytes
    return PeerHandover(run, n, address, count, as_bool(redelivered), message)


def encode_handovers(packet: PeerHandovers) -> tuple[int, int, bytes]:
    return 0, 0, b"".join(handovers_parts(packet.run, packet.handovers))


def handovers_parts(run: str, handovers: Sequence[Handover]) -> list[bytes]:
    """A PeerHandovers' body, in parts to join (a link joins them to the packet's header
    in one copy): each message's content is spliced, not encoded again."""
    parts = [_text(run), _U32.pack(len(handovers))]
    heads: dict[str, tuple[Any, bytes]] = {}  # address -> (its item head's packer, bytes)
    for key, name, m, delivery_count, redelivered in handovers:  # unpacked in one step
        content = m.encoded
        if content is None:
            content = encode_content(m)
        head = heads.get(name)
        if head is None:
            encoded = name.encode()
            head = heads[name] = (_item_head(len(encoded)).pack, encoded)
        pack, address = head
        parts += (
            pack(
                key[1],  # its n
                len(address),
                address,
                delivery_count,
                redelivered,
                m.timestamp,
                m.expiration,
                len(content),
            ),
            content,
        )
    return parts


def decode_handovers(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerHandovers:
    # read in place, from start to end: the packet is not copied out of the read first
    if start + _U16.size > end:
        raise malformed("string overruns the packet")
    (length,) = _U16.unpack_from(data, start)
    pos = start + _U16.size + length
    if pos + _U32.size > end:
        raise malformed("string overruns the packet")
    run = data[start + _U16.size : pos].decode()
    (count,) = _U32.unpack_from(data, pos)
    pos += _U32.size
    if count * (_KEY_HEAD.size + _FIELDS.size) > end - pos:  # absurd counts, before reading
        raise malformed("list overruns the packet")
    size = end
    out: list[Handover] = []
    unpack_key, unpack_fields = _KEY_HEAD.unpack_from, _FIELDS.unpack_from
    new = tuple.__new__
    addresses: dict[bytes, str] = {}  # the hand-overs of one packet mostly share their queue
    for _ in range(count):
        if pos + _KEY_HEAD.size > size:
            raise malformed("a hand-over overruns the packet")
        n, length = unpack_key(data, pos)
        pos += _KEY_HEAD.size
        stop = pos + length
        if stop + _FIELDS.size > size:
            raise malformed("a hand-over overruns the packet")
        raw = data[pos:stop]
        address = addresses.get(raw)
        if address is None:
            address = addresses[raw] = raw.decode()
        delivery_count, redelivered, ts, exp, length = unpack_fields(data, stop)
        pos = stop + _FIELDS.size
        stop = pos + length
        if stop > size:
            raise malformed("a hand-over overruns the packet")
        content = data[pos:stop]
        message = decode_content(content, 0, length, max_properties, ts, exp)
        message.encoded = content  # the splice, as a hand-over's
        pos = stop
        if redelivered > 1:
            raise malformed("a hand-over's redelivered flag is neither 0 nor 1")
        # the named tuples made as their own constructors make them, with no Python step
        key = new(HandoverKey, (run, n))
        out.append(new(Handover, (key, address, message, delivery_count, redelivered == 1)))
    if pos != end:
        raise malformed("trailing bytes in PeerHandovers")
    return PeerHandovers(run, tuple(out))


def encode_keys(packet: PeerConfirm | PeerRefuse | PeerRelease) -> tuple[int, int, bytes]:
    return 0, 0, _keys(packet.keys)


def keys_decoder(cls: type[PeerConfirm | PeerRefuse | PeerRelease]) -> Any:
    def decode(data: bytes, start: int, end: int, header: Any, max_properties: int) -> Any:
        r = _Reader(data[start:end], 0)
        keys = r.keys()
        r.end(cls.__name__)
        return cls(keys)

    return decode


def encode_demand(packet: PeerDemand) -> tuple[int, int, bytes]:
    return 0, 0, _text(packet.address) + _selectors(packet.selectors)


def decode_demand(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerDemand:
    r = _Reader(data[start:end], 0)
    packet = PeerDemand(r.text(), r.selectors())
    r.end("PeerDemand")
    return packet


def encode_resume(packet: PeerResume) -> tuple[int, int, bytes]:
    parts = [_keys(packet.keys), _U32.pack(len(packet.demands))]
    parts += [_text(address) + _selectors(s) for address, s in packet.demands]
    return 0, 0, b"".join(parts)


def decode_resume(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerResume:
    r = _Reader(data[start:end], 0)
    keys = r.keys()
    demands = tuple((r.text(), r.selectors()) for _ in range(r.count(6)))
    r.end("PeerResume")
    return PeerResume(keys, demands)
