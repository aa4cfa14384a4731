"""Message ids between chute (text) and seed 002 (16 bytes)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.message import new_message_id
from chute.smq import to_message_id, to_wire_id


@given(st.binary(min_size=16, max_size=16))
def test_wire_ids_round_trip(wire: bytes) -> None:
    assert to_wire_id(to_message_id(wire)) == wire


def test_generated_ids_keep_their_bytes() -> None:
    message_id = new_message_id()
    assert to_message_id(to_wire_id(message_id)) == message_id


@pytest.mark.parametrize("message_id", ["order-17", "ID:host-1:2", "Ä" * 40, "ab" * 15])
def test_other_ids_hash_to_a_stable_16_bytes(message_id: str) -> None:
    wire = to_wire_id(message_id)
    assert len(wire) == 16
    assert to_wire_id(message_id) == wire
    assert to_wire_id(message_id + "x") != wire


def test_a_wire_id_is_16_bytes() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        to_message_id(b"123")


def test_other_ids_hash_as_docs_smq_md_says() -> None:
    """BLAKE2b with a 16-byte digest size, which is not the first 16 bytes of BLAKE2b-512."""
    wire = to_wire_id("order-17")
    assert wire == hashlib.blake2b(b"order-17", digest_size=16).digest()
    assert wire != hashlib.blake2b(b"order-17").digest()[:16]
    docs = Path(__file__).parents[3] / "docs" / "smq.md"
    said = " ".join(docs.read_text().split())
    assert "`hashlib.blake2b(id, digest_size=16)`" in said
    assert "first 16 bytes of the BLAKE2b digest" not in said
