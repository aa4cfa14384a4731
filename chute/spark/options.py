"""The connector's options, as Spark hands them over: strings in a case-insensitive map.

Read and write share ``url``, ``login``/``passcode`` (or ``user``/``password``,
or in the URL: ``chute://login:passcode@host``) and ``destination``. TLS follows
the URL (``chutes://``), with ``tlsCaFile``, ``tlsVerify`` and a client
certificate (``tlsCertFile``, ``tlsKeyFile``) whose commonName names the user.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from chute.client.blocking import Connection, connect
from chute.core.address import canonical
from chute.errors import ConnectError

DEFAULT_URL: Final = "chute://127.0.0.1:5445"
DEFAULT_CURSOR: Final = "spark"
_Get = Callable[..., str | None]
RECONNECT_S: Final = 30.0
"""How long the driver keeps trying to reach a broker that went away (a restart)."""


class OptionError(ValueError):
    """An option is missing or has a value the connector cannot use."""


@dataclass(frozen=True)
class ChuteOptions:
    """Every option of the ``chute`` data source, parsed once (picklable)."""

    url: str = DEFAULT_URL
    destination: str | None = None
    cursor: str = DEFAULT_CURSOR
    selector: str | None = None
    starting: str = "earliest"
    max_per_trigger: int = 0
    partitions: int = 2
    login: str | None = None
    passcode: str | None = None
    lease_ms: int = 0
    page_messages: int = 4096
    timeout: float = 30.0
    tls_ca: str | None = None  # chutes:// URLs: a CA file to trust (default: the system's)
    tls_verify: bool = True
    tls_cert: str | None = None  # chutes:// URLs: a client certificate (its CN is the user)
    tls_key: str | None = None  # its key, if not in tls_cert

    @classmethod
    def parse(cls, options: Mapping[str, str], *, need_destination: bool = True) -> ChuteOptions:
        """Raises OptionError for a missing destination or a malformed value."""
        get = _getter(options)
        destination = get("destination", "dest", "address")
        if destination is not None:
            try:
                destination = canonical(destination)
            except ValueError as exc:
                raise OptionError(f"option destination: {exc}") from None
        elif need_destination:
            raise OptionError('option "destination" is required (queue:NAME or topic:NAME)')
        starting = (get("startingOffsets", "startingOffset") or "earliest").strip().lower()
        if starting not in ("earliest", "latest") and not starting.isdigit():
            raise OptionError(
                f"option startingOffsets must be earliest, latest or a sequence number, "
                f"not {starting!r}"
            )
        return cls(
            url=get("url") or DEFAULT_URL,
            destination=destination,
            cursor=get("cursor", "subscription", "cursorName") or DEFAULT_CURSOR,
            selector=get("selector") or None,
            starting=starting,
            max_per_trigger=_int(get, "maxMessagesPerTrigger", 0),
            partitions=max(1, _int(get, "numPartitions", 2)),
            login=get("login", "user"),
            passcode=get("passcode", "password"),
            lease_ms=_int(get, "leaseMs", 0),
            page_messages=max(1, _int(get, "pageMessages", 4096)),
            timeout=float(_int(get, "timeoutMs", 30_000)) / 1000,
            tls_ca=get("tlsCaFile", "tls.caFile") or None,
            tls_verify=(get("tlsVerify") or "true").strip().lower() not in ("false", "0", "no"),
            tls_cert=get("tlsCertFile", "tls.certFile") or None,
            tls_key=get("tlsKeyFile", "tls.keyFile") or None,
        )

    @property
    def address(self) -> str:
        if self.destination is None:
            raise OptionError('option "destination" is required (queue:NAME or topic:NAME)')
        return self.destination

    def connect(self) -> Connection:
        """A new connection to the broker (callers close it)."""
        return connect(
            self.url,
            login=self.login,
            passcode=self.passcode,
            timeout=self.timeout,
            tls_ca=self.tls_ca,
            tls_verify=self.tls_verify,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
        )

    def connect_retrying(self, patience: float = RECONNECT_S) -> Connection:
        """Connect, trying again for ``patience`` seconds while the broker is unreachable
        (it may be restarting). Raises the last ConnectError."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return self.connect()
            except ConnectError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)  # a back-off between attempts, not a synchronisation


def _getter(options: Mapping[str, str]) -> _Get:
    lowered = {str(k).lower(): v for k, v in options.items()}

    def get(*names: str) -> str | None:
        for name in names:
            value = lowered.get(name.lower())
            if value is not None:
                return str(value)
        return None

    return get


def _int(get: _Get, name: str, default: int) -> int:
    value = get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {value!r}") from None
    if number < 0:
        raise OptionError(f"option {name} must not be negative, not {number}")
    return number
