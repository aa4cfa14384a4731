"""The cluster URL: where the coordinator (etcd) is and which cluster to join.

``etcd://HOST:PORT[,HOST:PORT...][/NAME]``, optionally with ``USER:PASSWORD@`` before
the endpoints when etcd has authentication on. ``NAME`` (letters, digits, ``.``,
``_``, ``-``; default ``chute``) names the cluster: every key the cluster writes
lives under ``/NAME/``, so several clusters can share one etcd. An IPv6 host is
written in brackets (``[::1]:2379``). Every mistake is a :class:`ClusterUrlError`
that says what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

from chute.cluster.errors import ClusterUrlError

SCHEME: Final = "etcd://"
DEFAULT_NAME: Final = "chute"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HOST: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self}"


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    endpoints: tuple[Endpoint, ...]
    name: str = DEFAULT_NAME
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        """The URL without its password (safe to log)."""
        user = f"{self.user}@" if self.user else ""
        return f"{SCHEME}{user}{','.join(map(str, self.endpoints))}/{self.name}"


def check_name(name: str, what: str = "cluster name") -> str:
    """``name`` if it is a valid cluster (or node) name: it becomes part of etcd keys."""
    if not _NAME.fullmatch(name):
        raise ClusterUrlError(
            f"bad {what} {name!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def _endpoint(text: str, url: str) -> Endpoint:
    if not text:
        raise ClusterUrlError(f"empty endpoint in cluster URL {url!r}: expected HOST:PORT")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":") or ":" not in host:
            raise ClusterUrlError(f"bad endpoint {text!r} in {url!r}: expected [IPV6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ClusterUrlError(f"endpoint {text!r} in {url!r} has no port: expected HOST:PORT")
        if not _HOST.fullmatch(host):
            raise ClusterUrlError(f"bad host {host!r} in {url!r}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ClusterUrlError(f"bad port {port_text!r} in {url!r}: expected 1..65535")
    return Endpoint(host, int(port_text))


def parse_cluster_url(url: str) -> ClusterUrl:
    """Parse ``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/NAME]``."""
    if not url.startswith(SCHEME):
        scheme = url.partition("://")[0] if "://" in url else url
        raise ClusterUrlError(
            f"cluster URL {url!r} does not start with {SCHEME!r} (got {scheme!r}); "
            "expected etcd://HOST:PORT[,HOST:PORT...][/NAME]"
        )
    rest = url[len(SCHEME) :]
    authority, slash, path = rest.partition("/")
    user = password = None
    if "@" in authority:
        credentials, _, authority = authority.rpartition("@")
        user_text, colon, password_text = credentials.partition(":")
        if not user_text or not colon:
            raise ClusterUrlError(f"cluster URL credentials must be USER:PASSWORD@ in {url!r}")
        user, password = unquote(user_text), unquote(password_text)
    if not authority:
        raise ClusterUrlError(f"cluster URL {url!r} names no etcd endpoint")
    endpoints = tuple(_endpoint(part, url) for part in authority.split(","))
    if len(set(endpoints)) != len(endpoints):
        raise ClusterUrlError(f"cluster URL {url!r} lists an endpoint twice")
    name = path.rstrip("/") if slash else ""
    if "/" in name or "?" in name or "#" in name:
        raise ClusterUrlError(f"cluster name in {url!r} must be one path segment")
    return ClusterUrl(
        endpoints=endpoints,
        name=check_name(name) if name else DEFAULT_NAME,
        user=user,
        password=password,
    )
