"""Every packet type's codec, by tag, and the two ways in: encode a packet, decode a body.

The table joins the generic codecs built from the spec table
(:mod:`chute.protocol.spec`: the header, the field kinds, one spec per packet)
and the hot paths that splice content blocks (:mod:`chute.protocol.splice`:
Send and Deliver). :class:`~chute.protocol.codec.PacketCodec` decodes through
:func:`decode_body`; both client drivers and the broker encode through
:func:`encode_packet` (or, on the hot paths, straight through ``splice``).

:func:`decode_body` raises only :class:`~chute.errors.RemoteProtocolError`;
:func:`encode_packet` raises :class:`~chute.errors.LocalProtocolError` for
values the wire cannot carry. Pure: safe on any thread.
"""

from __future__ import annotations

from typing import Final

from chute.content import DEFAULT_MAX_PROPERTIES, ENCODE_ERRORS, malformed
from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.protocol.packets import PROTOCOL_VERSION, Header, Packet, PacketType
from chute.protocol.spec import DECODE_ERRORS, HEADER, HEADER_REST, SPEC_CODECS, Codec
from chute.protocol.splice import SPLICE_CODECS

CODECS: Final[dict[int, Codec]] = {**SPEC_CODECS, **SPLICE_CODECS}
"""Body codecs by packet type tag: one for every :class:`PacketType`."""
_BY_CLASS: Final = {c.cls: c for c in CODECS.values()}

VERSIONLESS: Final = frozenset({PacketType.CONNECT, PacketType.CONNECTED, PacketType.ERROR})
"""The packet types whose bodies never change, so peers can always negotiate the version."""


def encode_packet(
    packet: Packet,
    correlation_id: int = 0,
    target_id: int | None = None,
    callback_id: int | None = None,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """A whole packet (header + body). The header's target and callback come from the
    packet's id fields unless given.

    Raises:
        LocalProtocolError: the packet cannot be encoded (a value out of range, a
            string too long, a value of the wrong type).
    """
    try:
        codec = _BY_CLASS[type(packet)]
        target, callback, body = codec.encode(packet)
        return (
            HEADER.pack(
                len(body) + HEADER_REST,
                version,
                codec.tag,
                correlation_id,
                target if target_id is None else target_id,
                callback if callback_id is None else callback_id,
            )
            + body
        )
    except LocalProtocolError:
        raise
    except (*ENCODE_ERRORS, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise LocalProtocolError(f"cannot encode {packet!r}: {exc}") from exc


def decode_body(  # noqa: PLR0917 - hot path, called positionally
    packet_type: int,
    header: Header,
    data: bytes,
    start: int = 0,
    end: int | None = None,
    max_properties: int = DEFAULT_MAX_PROPERTIES,
) -> Packet:
    """Decode the body ``data[start:end]`` of a packet of type ``packet_type``.

    Raises:
        RemoteProtocolError: unknown type ('unknown-packet-type') or a malformed body
            ('malformed-packet', 'too-many-properties').
    """
    codec = CODECS.get(packet_type)
    if codec is None:
        raise RemoteProtocolError(f"unknown packet type {packet_type}", "unknown-packet-type")
    try:
        packet: Packet = codec.decode(
            data, start, len(data) if end is None else end, header, max_properties
        )
    except DECODE_ERRORS as exc:
        raise malformed(f"malformed {codec.tag.name} packet: {exc}") from exc
    return packet


__all__ = ["CODECS", "VERSIONLESS", "decode_body", "encode_packet"]
