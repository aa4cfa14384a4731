"""The cluster URL: every form a user may write, and a clear error for each mistake."""

from __future__ import annotations

import pytest

from chute.cluster.errors import ClusterUrlError
from chute.cluster.url import ClusterUrl, Endpoint, parse_cluster_url


def test_one_endpoint_and_the_default_name() -> None:
    assert parse_cluster_url("etcd://127.0.0.1:2379") == ClusterUrl(
        (Endpoint("127.0.0.1", 2379),), "chute"
    )
    assert parse_cluster_url("etcd://localhost:2379/").name == "chute"


def test_several_endpoints_a_name_and_ipv6() -> None:
    url = parse_cluster_url("etcd://h1:1,h2.example.org:2,[::1]:3/prod-eu_1")
    assert url.endpoints == (Endpoint("h1", 1), Endpoint("h2.example.org", 2), Endpoint("::1", 3))
    assert url.name == "prod-eu_1"
    assert str(url) == "etcd://h1:1,h2.example.org:2,[::1]:3/prod-eu_1"


def test_credentials_are_kept_but_never_shown() -> None:
    url = parse_cluster_url("etcd://chute:s%40cret@h1:2379/c")
    assert (url.user, url.password) == ("chute", "s@cret")
    assert "cret" not in str(url)
    assert "cret" not in repr(url)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("http://h:2379", "does not start with 'etcd://'"),
        ("h:2379", "does not start with 'etcd://'"),
        ("etcd://", "names no etcd endpoint"),
        ("etcd:///name", "names no etcd endpoint"),
        ("etcd://h1", "has no port"),
        ("etcd://h1:", "bad port"),
        ("etcd://h1:0", "bad port"),
        ("etcd://h1:65536", "bad port"),
        ("etcd://h1:x", "bad port"),
        ("etcd://h1:1,,h2:2", "empty endpoint"),
        ("etcd://h1:1,h1:1", "lists an endpoint twice"),
        ("etcd://bad_host!:1", "bad host"),
        ("etcd://[::1:1", "expected [IPV6]:PORT"),
        ("etcd://h1:1/a/b", "one path segment"),
        ("etcd://h1:1/-x", "bad cluster name"),
        ("etcd://h1:1/" + "x" * 65, "bad cluster name"),
        ("etcd://user@h1:1", "USER:PASSWORD@"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, complaint: str) -> None:
    with pytest.raises(ClusterUrlError, match=complaint.replace("[", r"\[").replace("(", r"\(")):
        parse_cluster_url(url)
