"""Names around DropboxMQ messages: claimed files, subscription directories, destinations."""

from __future__ import annotations

import pytest

from chute.dropbox.names import (
    DEFAULT_CLAIM_ROOM,
    MAX_CLIENT_ID_BYTES,
    NAME_MAX_BYTES,
    check_destination_name,
    claim_name,
    claim_room,
    destination_parts,
    split_claim_name,
    subscription_claim_room,
    subscription_dir_name,
)
from chute.errors import InvalidAddress


def test_claim_name_round_trip() -> None:
    claimed = claim_name("client.1~x", "4.1.T")
    assert claimed == "client%2E1%7Ex~4.1.T"
    assert split_claim_name(claimed) == ("client.1~x", "4.1.T")
    assert split_claim_name("4.1.T") == (None, "4.1.T")


def test_everything_up_to_the_first_tilde_is_a_claim_prefix() -> None:
    """DropboxMQ drops up to the first ``~`` of any name it reads."""
    assert split_claim_name("c~backup~1") == ("c", "backup~1")
    assert split_claim_name("~x") == (None, "x")
    assert split_claim_name("java+C%7E1~4.1.T") == ("java C~1", "4.1.T")


def test_claiming_a_claimed_name_replaces_its_prefix() -> None:
    """A file put back into target/ by another consumer keeps its prefix there."""
    assert claim_name("me", "javaC~4.1.T.....JMSXDeliveryCountI=1") == (
        "me~4.1.T.....JMSXDeliveryCountI=1"
    )


@pytest.mark.parametrize("client", ["", "c" * (MAX_CLIENT_ID_BYTES + 1), "\ud800"])
def test_claim_name_refuses_bad_client_ids(client: str) -> None:
    with pytest.raises(InvalidAddress):
        claim_name(client, "4.1.T")
    with pytest.raises(InvalidAddress):
        claim_room([client])


def test_claim_name_refuses_a_name_it_cannot_fit() -> None:
    assert len(claim_name("c", "x" * 253)) == NAME_MAX_BYTES
    with pytest.raises(InvalidAddress, match="256 bytes"):
        claim_name("c", "x" * 254)


def test_claim_room_is_the_longest_prefix_of_the_claimants() -> None:
    assert claim_room(["javaC"]) == len("javaC~")
    assert claim_room(["a", "b.c"]) == len("b%2Ec~")
    # no claimant known: room for the client ids DropboxMQ generates
    generated = "1795419216341000-0462377156"
    assert claim_room([]) == DEFAULT_CLAIM_ROOM == len(generated + "~")


def test_subscription_dir_name() -> None:
    assert subscription_dir_name("sub.1", "conn 1") == "sub%2E1.conn+1"
    with pytest.raises(InvalidAddress):
        subscription_dir_name("", "c")
    with pytest.raises(InvalidAddress):
        subscription_dir_name("s" * 300, "c")


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "a/b",
        "/abs",
        "a\\b",
        "a\x00b",
        "a..b",
        "../x",
        ".incoming",
        "hidden.",
        "x" * 201,
        "topic-root",
        "Topic-Root",
        "a b",
    ],
)
def test_destination_names_that_would_leave_the_root_are_refused(name: str) -> None:
    with pytest.raises(InvalidAddress):
        check_destination_name(name)


def test_destination_parts() -> None:
    assert destination_parts("orders.eu") == ("orders.eu",)
    assert destination_parts("a.b", topic=True) == ("topic-root", "a", "b")
    assert destination_parts("topic-root", topic=True) == ("topic-root", "topic-root")
    assert check_destination_name("q-1_x:y") == "q-1_x:y"
    for bad in ("a.", ".a", "a..b", "a/b"):
        with pytest.raises(InvalidAddress):
            destination_parts(bad, topic=True)


def test_a_subscription_directory_names_the_room_its_client_claims_with() -> None:
    assert subscription_claim_room(subscription_dir_name("audit", "javaC")) == len("javaC~")
    assert subscription_claim_room(subscription_dir_name("a.b", "c.d")) == len("c%2Ed~")
    assert subscription_claim_room(subscription_dir_name("feed", "__shared__")) == (
        MAX_CLIENT_ID_BYTES + 1  # any client id may claim from a shared one
    )
    assert subscription_claim_room("made-by-hand") == DEFAULT_CLAIM_ROOM
    assert subscription_claim_room("trailing.") == DEFAULT_CLAIM_ROOM
