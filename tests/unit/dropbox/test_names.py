"""Names around DropboxMQ messages: claimed files, subscription directories, destinations."""

from __future__ import annotations

import pytest

from chute.dropbox.names import (
    MAX_CLIENT_ID_BYTES,
    check_destination_name,
    claim_name,
    destination_parts,
    split_claim_name,
    subscription_dir_name,
)
from chute.errors import InvalidAddress


def test_claim_name_round_trip() -> None:
    claimed = claim_name("client.1~x", "4.1.T")
    assert claimed == "client%2E1%7Ex~4.1.T"
    assert split_claim_name(claimed) == ("client.1~x", "4.1.T")
    assert split_claim_name("c~backup~1") == ("c", "backup~1")
    assert split_claim_name("4.1.T") == (None, "4.1.T")
    assert split_claim_name("~x") == (None, "~x")


@pytest.mark.parametrize("client", ["", "c" * (MAX_CLIENT_ID_BYTES + 1), "\ud800"])
def test_claim_name_refuses_bad_client_ids(client: str) -> None:
    with pytest.raises(InvalidAddress):
        claim_name(client, "4.1.T")


def test_claim_name_refuses_a_name_it_cannot_fit() -> None:
    with pytest.raises(InvalidAddress):
        claim_name("c", "x" * 254)


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
