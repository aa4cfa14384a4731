"""A CursorPage body read column by column, without a Message per entry.

What a columnar reader (Spark's source, :mod:`chute.spark.pages`) takes from a
page: one pass over the bytes (layouts in :mod:`chute.protocol.spec` and
:mod:`chute.content`) that keeps, per entry, only slices:

* the fixed-size head of each entry and of its content block (46 bytes: seq,
  delivery count, redelivered, timestamp, expiration, content length, priority,
  flags, kind, the string lengths and the property count), gathered into one
  buffer of equal-sized records, so that a fixed-width field becomes a column
  with a few strided copies (:meth:`PageColumns.column`) instead of a Python
  int per message;
* the id (UTF-8 bytes; whoever makes text of it checks the UTF-8);
* the body, gathered into one buffer with int32 offsets, as Arrow keeps a
  binary column.

Only the messages with a correlation id, reply-to, type or properties ("rich"
ones) take a second, slower look. :func:`page_columns` raises
:class:`~chute.errors.RemoteProtocolError` (``malformed-packet``,
``too-many-properties``) for a body :func:`chute.protocol.wire.decode_body`
would refuse, except that string bytes other than property names and values
are not decoded here. Pure: safe on any thread.
"""

from __future__ import annotations

import dataclasses
import struct
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any, Final, NamedTuple

from chute.content import DEFAULT_MAX_PROPERTIES, KINDS, malformed
from chute.errors import RemoteProtocolError
from chute.message import PropertyType
from chute.protocol.packets import CursorPage, Header, PacketType
from chute.protocol.wire import decode_body

HEAD: Final = 46
"""Bytes of an entry's head plus its content block's head: one record of ``heads``."""
_CONTENT_AT: Final = 33  # where the content block starts in an entry
_SHAPE: Final = struct.Struct(">IxBxHQ")
"""At entry + 29: content length, flags, id length, and the other three string lengths
with the property count as one number (zero for a plain message)."""
_SHAPE_AT: Final = 29
_RICH: Final = struct.Struct(">BxHHHHH")  # at entry + 34: flags, the string lengths, count
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_PROP_HEAD: Final = struct.Struct(">BH")
_HAS_CORR, _HAS_REPLY, _HAS_TYPE = 2, 4, 8


class Field(NamedTuple):
    """Where a fixed-width field sits in a ``heads`` record, and its width in bytes."""

    offset: int
    width: int


SEQ: Final = Field(0, 8)
DELIVERY_COUNT: Final = Field(8, 4)
REDELIVERED: Final = Field(12, 1)
TIMESTAMP: Final = Field(13, 8)
EXPIRATION: Final = Field(21, 8)
PRIORITY: Final = Field(33, 1)
FLAGS: Final = Field(34, 1)
KIND: Final = Field(35, 1)

KIND_NAMES: Final = tuple(k.value for k in KINDS)
"""The text of each body kind, by its wire code (the ``kind`` column's values)."""

_ALL_BYTES: Final = bytes(range(256))
_VALID: Final = {  # the values each one-byte field may take (content.decode_content's rules)
    PRIORITY: bytes(range(10)),
    FLAGS: bytes(range(16)),
    REDELIVERED: b"\x00\x01",
    KIND: bytes(range(len(KINDS))),
}
_SIGNED: Final = bytes(range(128))  # a most significant byte that keeps a u64/u32 signed

_STRING: Final = int(PropertyType.STRING)
_BOOLEAN_TEXT: Final = ("false", "true")  # a byte past 1 is an IndexError: malformed
_VALUES: Final[dict[int, tuple[struct.Struct, Callable[[Any], str], str, int]]] = {
    # tag: (value struct, its text as str() of the decoded value gives it, type name, size)
    int(t): (
        struct.Struct(fmt),
        _BOOLEAN_TEXT.__getitem__ if fmt == ">B" else str,
        t.name.lower(),
        struct.calcsize(fmt),
    )
    for t, fmt in (
        (PropertyType.BOOLEAN, ">B"),
        (PropertyType.BYTE, ">b"),
        (PropertyType.SHORT, ">h"),
        (PropertyType.INT, ">i"),
        (PropertyType.LONG, ">q"),
        (PropertyType.FLOAT, ">f"),
        (PropertyType.DOUBLE, ">d"),
    )
}


@dataclasses.dataclass(slots=True)
class Properties:
    """The properties of a page's messages, flat, in message order: each message's
    names, values as text and JMS type names (``counts``: how many each message
    with properties has, by message index)."""

    counts: dict[int, int] = dataclasses.field(default_factory=dict)
    names: list[str] = dataclasses.field(default_factory=list)
    values: list[str] = dataclasses.field(default_factory=list)
    types: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class PageColumns:
    """The entries of one CursorPage as columns.

    ``heads`` holds ``count`` records of :data:`HEAD` bytes (read them with
    :meth:`column`); ``ids`` and the optional strings are UTF-8 bytes, None where
    absent (``rich`` counts the messages that have any optional string or
    property); ``properties`` has an entry only for the messages with properties,
    by index; message ``i``'s body is ``bodies[offsets[i]:offsets[i + 1]]``.
    """

    next: int
    count: int
    heads: bytes
    ids: list[bytes]
    rich: int
    correlation_ids: list[bytes | None]
    reply_tos: list[bytes | None]
    types: list[bytes | None]
    properties: Properties
    bodies: bytes
    offsets: array[int]

    def column(self, field: Field) -> bytes | bytearray:
        """Field ``field`` of every message, little-endian (Arrow's byte order), in
        ``count * field.width`` bytes. Unsigned as on the wire; ``SEQ`` and
        ``DELIVERY_COUNT`` are known to fit their signed type."""
        return head_column(self.heads, self.count, field)


def head_column(heads: bytes, count: int, field: Field) -> bytes | bytearray:
    """Field ``field`` of ``count`` records of :data:`HEAD` bytes (see
    :meth:`PageColumns.column`)."""
    offset, width = field
    if width == 1:
        return heads[offset::HEAD]
    out = bytearray(count * width)
    for k in range(width):  # byte k of the big-endian value is byte width-1-k here
        out[width - 1 - k :: width] = heads[offset + k :: HEAD]
    return out


def check_heads(heads: bytes) -> None:
    """The one-byte fields of ``heads`` (records of :data:`HEAD` bytes) in range, and the
    u64/u32 that become signed columns under their sign bit.

    Raises:
        RemoteProtocolError: a field out of range.
    """
    _check(heads)


@dataclasses.dataclass(frozen=True, slots=True)
class RawCursorPage(CursorPage):
    """A CursorPage whose entries are still bytes (what a codec made with
    ``raw_pages=True`` returns): ``body`` is the packet's body, ``next`` is read,
    ``messages`` stays empty until :meth:`decode`. So a client's reader thread hands
    a page on without decoding it, and the reader decodes it as it needs:
    :meth:`decode` into messages, :func:`page_columns` into columns."""

    body: bytes = b""

    def decode(self, max_properties: int = DEFAULT_MAX_PROPERTIES) -> CursorPage:
        """The page with its messages decoded.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        page = decode_body(PacketType.CURSOR_PAGE, Header(), self.body, 0, None, max_properties)
        if not isinstance(page, CursorPage):  # pragma: no cover - the table maps the type
            raise malformed("not a CursorPage")
        return page


def raw_cursor_page(data: bytes, start: int, end: int) -> RawCursorPage:
    """The CursorPage whose body is ``data[start:end]``, left undecoded.

    Raises:
        RemoteProtocolError: the body is too short for a page.
    """
    body = data[start:end]
    return RawCursorPage(page_next(body)[0], (), body)


def page_next(body: bytes) -> tuple[int, int]:
    """``(next, count)`` of a CursorPage body: where the next page starts, and how many
    entries this one holds.

    Raises:
        RemoteProtocolError: the body is too short to hold them.
    """
    if len(body) < 12:
        raise malformed("CursorPage body too short")
    return _U64.unpack_from(body, 0)[0], _U32.unpack_from(body, 8)[0]


def page_columns(body: bytes, max_properties: int = DEFAULT_MAX_PROPERTIES) -> PageColumns:
    """The columns of the CursorPage whose body (``next`` u64, then the entries) is ``body``.

    Raises:
        RemoteProtocolError: the body is malformed, or a message has more than
            ``max_properties`` properties.
    """
    try:
        return _columns(body, max_properties)
    except (
        struct.error,
        KeyError,
        IndexError,
        ValueError,
    ) as exc:  # UnicodeDecodeError is a ValueError
        raise malformed(f"malformed CursorPage packet: {exc}") from exc


def _columns(data: bytes, max_properties: int) -> PageColumns:
    next_start, count = page_next(data)
    size = len(data)
    if count * HEAD > size:
        raise malformed("CursorPage entry count overruns the packet")
    view = memoryview(data)
    shape = _SHAPE.unpack_from
    heads: list[bytes] = []
    add_head = heads.append
    ids: list[bytes] = []
    add_id = ids.append
    bodies: list[memoryview] = []
    add_body = bodies.append
    rich: list[tuple[int, int]] = []  # (index, entry position)
    pos = 12
    for i in range(count):
        length, flags, id_len, more = shape(data, pos + _SHAPE_AT)
        q = pos + HEAD
        r = q + id_len
        end = pos + _CONTENT_AT + length
        add_head(data[pos:q])
        add_id(data[q:r])
        if more or flags > 1:
            rich.append((i, pos))
        elif r > end:
            raise malformed("message content overruns its block")
        add_body(view[r:end])  # a rich one's is cut again once its extras are read
        pos = end
    if pos != size:
        raise malformed("CursorPage entries do not fill the packet")
    joined = b"".join(heads)
    corr, reply, types, properties = _extras(data, rich, bodies, count, max_properties)
    _check(joined)
    return PageColumns(
        next_start,
        count,
        joined,
        ids,
        len(rich),
        corr,
        reply,
        types,
        properties,
        b"".join(bodies),
        array("i", accumulate(map(len, bodies), initial=0)),
    )


def _check(heads: bytes) -> None:
    """The one-byte fields in range and the u64/u32 that become signed columns under
    their sign bit, checked for every message at once."""
    for field, valid in _VALID.items():
        if heads[field.offset :: HEAD].translate(None, valid):
            raise malformed("message content has a bad priority, flags, redelivered or kind")
    for field in (SEQ, DELIVERY_COUNT):
        if heads[field.offset :: HEAD].translate(None, _SIGNED):
            raise malformed("CursorPage entry has a sequence number or delivery count out of range")


def _extras(  # noqa: PLR0915 - one tight loop: the rich messages' second look
    data: bytes,
    rich: list[tuple[int, int]],
    bodies: list[memoryview],
    count: int,
    max_properties: int,
) -> tuple[list[bytes | None], list[bytes | None], list[bytes | None], Properties]:
    """The optional strings and properties of the rich messages (``(index, entry
    position)``), each one's body cut where they end."""
    corr: list[bytes | None] = [None] * count
    reply: list[bytes | None] = [None] * count
    types: list[bytes | None] = [None] * count
    properties = Properties()
    counts = properties.counts
    names, values, kinds = properties.names, properties.values, properties.types
    view = memoryview(data)
    unpack = _RICH.unpack_from
    length_at = _U32.unpack_from
    head = _PROP_HEAD.unpack_from
    table = _VALUES
    for i, at in rich:
        flags, id_len, corr_len, reply_len, type_len, n_props = unpack(data, at + 34)
        q = at + HEAD + id_len
        if flags & _HAS_CORR:
            r = q + corr_len
            corr[i] = data[q:r]
            q = r
        elif corr_len:
            raise malformed("absent correlation id with a length")
        if flags & _HAS_REPLY:
            r = q + reply_len
            reply[i] = data[q:r]
            q = r
        elif reply_len:
            raise malformed("absent reply-to with a length")
        if flags & _HAS_TYPE:
            r = q + type_len
            types[i] = data[q:r]
            q = r
        elif type_len:
            raise malformed("absent type with a length")
        if n_props:
            if n_props > max_properties:
                raise RemoteProtocolError(
                    f"message has {n_props} properties, the limit is {max_properties}",
                    "too-many-properties",
                )
            # a name given twice keeps its first place and its last value, as a dict does
            texts: dict[str, str] = {}
            named: dict[str, str] = {}
            for _ in range(n_props):
                tag, name_len = head(data, q)
                p = q + 3
                q = p + name_len
                name = data[p:q].decode()
                if tag == _STRING:
                    p = q + 4
                    q = p + length_at(data, q)[0]
                    texts[name] = data[p:q].decode()
                    named[name] = "string"
                else:
                    st, text, kind, size = table[tag]  # KeyError: an unknown tag
                    texts[name] = text(st.unpack_from(data, q)[0])
                    named[name] = kind
                    q += size
            names += texts
            values += texts.values()
            kinds += named.values()
            counts[i] = len(texts)
        end = at + _CONTENT_AT + length_at(data, at + _SHAPE_AT)[0]
        if q > end:
            raise malformed("message content overruns its block")
        bodies[i] = view[q:end]
    return corr, reply, types, properties


__all__ = [
    "DELIVERY_COUNT",
    "EXPIRATION",
    "FLAGS",
    "HEAD",
    "KIND",
    "KIND_NAMES",
    "PRIORITY",
    "REDELIVERED",
    "SEQ",
    "TIMESTAMP",
    "Field",
    "PageColumns",
    "Properties",
    "RawCursorPage",
    "check_heads",
    "head_column",
    "page_columns",
    "page_next",
    "raw_cursor_page",
]
