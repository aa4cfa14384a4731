"""The connector's options: one table (:data:`OPTIONS`) declares each, parsing checks them.

Spark hands a data source its options as strings in a case-insensitive map (keys
lower-cased). :meth:`ChuteOptions.parse` turns that map into typed values and
refuses, with a message that says what to do, every key it does not know: a
misspelt name (with the closest known one), a name of Kafka's source that chute
does not support, or an option of the other side (a read option on a write).
Spark's own sink options (``checkpointLocation``, ``queryName``) pass.

Credentials go in ``password`` (alias ``passcode``), a key Spark's default
``spark.redaction.regex`` hides in plans; :func:`redact_passcode` makes Spark hide
``passcode`` too.
"""

from __future__ import annotations

import difflib
import enum
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from chute.client.blocking import BlockingConnection, connect
from chute.client.url import TCP, parse_url
from chute.core.model.address import canonical
from chute.errors import ConnectError

DEFAULT_URL: Final = "chute://127.0.0.1:5445"
RECONNECT_S: Final = 30.0
"""How long the driver keeps trying to reach a broker that went away (a restart)."""


class OptionError(ValueError):
    """An option is unknown, missing, or has a value the connector cannot use."""


class Side(enum.Flag):
    """Where an option applies: reads (``read``/``readStream``), writes, or both."""

    READ = enum.auto()
    WRITE = enum.auto()
    BOTH = READ | WRITE


# -- value types: each takes (option name, raw text) and returns the typed value ----------


def _text(_: str, raw: str) -> str | None:
    return raw or None


def _count(name: str, raw: str) -> int:
    try:
        number = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if number < 0:
        raise OptionError(f"option {name} must not be negative, not {number}")
    return number


def _positive(name: str, raw: str) -> int:
    return max(1, _count(name, raw))


def _flag(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, not {raw!r}")


def _destinations(name: str, raw: str) -> tuple[str, ...]:
    try:
        return tuple(dict.fromkeys(canonical(a.strip()) for a in raw.split(",") if a.strip()))
    except ValueError as exc:
        raise OptionError(f"option {name}: {exc}") from None


def _pattern(name: str, raw: str) -> str | None:
    text = raw.strip()
    if not text:
        return None
    if not text.startswith(("stream:", "/stream/")):
        raise OptionError(
            f"option {name}: a pattern names streams (stream:NAME with * for any characters, "
            f"e.g. stream:orders.*), not {raw!r}"
        )
    return text


def _starting(name: str, raw: str) -> str:
    text = raw.strip()
    if text.startswith("{"):
        return text  # Kafka's JSON form, per stream: checked against the streams (streams.py)
    text = text.lower()
    if text not in ("earliest", "latest") and not text.isdigit():
        raise OptionError(
            f"option {name} must be earliest, latest, an offset or JSON such as "
            f'{{"stream:a": 5}}, not {raw!r}'
        )
    return text


def _timestamp(name: str, raw: str) -> int | None:
    if not raw.strip():
        return None
    return _count(name, raw)


@dataclass(frozen=True)
class Option:
    """One option: its name (as documented), what it means, its type and default."""

    name: str
    side: Side
    type: str  # as the docs name it
    default: Any  # the typed value when the option is absent
    meaning: str
    parse: Callable[[str, str], Any]
    attr: str | None  # the ChuteOptions field it sets (None: Spark's own, unused)
    aliases: tuple[str, ...] = ()


# fmt: off
OPTIONS: Final[tuple[Option, ...]] = (
    Option("url", Side.BOTH, "string", DEFAULT_URL,
           "chute://host:port, or chutes://host:port for TLS; ws(s)://host:port/chute or "
           "http(s)://host:port/chute through the HTTP port where only HTTP gets through; "
           "chute://login:password@host:port carries credentials (percent-encoded); "
           "chute://h1:5445,h2:5445 lists the nodes of a cluster",
           _text, "url"),
    Option("destination", Side.BOTH, "queue:NAME | topic:NAME | stream:NAME[,...]", (),
           "what to read (a read needs it or pattern); several streams, comma-separated, in "
           "one read; for the sink, the target of rows without a destination column",
           _destinations, "destinations", ("dest", "address", "subscribe")),
    Option("login", Side.BOTH, "string", None, "the user name (wins over the URL's)",
           _text, "login", ("user",)),
    Option("password", Side.BOTH, "string", None,
           "the user's password (wins over the URL's); redacted in Spark's plans and UI",
           _text, "password", ("passcode",)),
    Option("tlsCaFile", Side.BOTH, "path", None,
           "with chutes://, wss://, https://: a CA file to trust instead of the system's store",
           _text, "tls_ca", ("tls.caFile",)),
    Option("tlsVerify", Side.BOTH, "boolean", True,
           "false skips the certificate check (testing only)", _flag, "tls_verify"),
    Option("tlsCertFile", Side.BOTH, "path", None,
           "with chutes://, wss://, https://: a client certificate; its commonName names the user",
           _text, "tls_cert", ("tls.certFile",)),
    Option("tlsKeyFile", Side.BOTH, "path", None,
           "the client certificate's key, if not in the same file",
           _text, "tls_key", ("tls.keyFile",)),
    Option("timeoutMs", Side.BOTH, "integer (ms)", 30_000, "request timeout",
           _count, "timeout_ms"),
    Option("pattern", Side.READ, "stream:NAME with *", None,
           "read every stream the pattern matches, looked up again at each trigger (a stream "
           "that appears is read from its first offset)", _pattern, "pattern",
           ("subscribePattern", "destinationPattern")),
    Option("cursor", Side.READ, "string", None,
           "stream reads (required): the name the broker keeps the query's place under; "
           "one per query, the same across its restarts",
           _text, "cursor", ("subscription", "cursorName")),
    Option("startingOffsets", Side.READ, "earliest | latest | offset | JSON", "earliest",
           "where a new checkpoint (or a batch read) starts; on streams also Kafka's JSON "
           'form {"stream:a": 5, "stream:b": -2} (-2 earliest, -1 latest)',
           _starting, "starting", ("startingOffset",)),
    Option("startingTimestamp", Side.READ, "integer (ms since the epoch)", None,
           "streams: start each stream at its first message accepted at or after this time "
           "(wins over startingOffsets)", _timestamp, "starting_timestamp"),
    Option("endingOffsets", Side.READ, "latest | offset | JSON", "latest",
           "batch reads of streams: where the read ends (exclusive); latest is the heads "
           "when the read is planned", _starting, "ending"),
    Option("failOnDataLoss", Side.READ, "boolean", True,
           "streams: fail when retention removed offsets the query had not read yet (false: "
           "warn and read on from what is kept)", _flag, "fail_on_loss"),
    Option("maxMessagesPerTrigger", Side.READ, "integer", 0,
           "stream reads: at most this many offsets per micro-batch, shared among the "
           "streams in proportion to their backlog (0: no limit)",
           _count, "max_per_trigger", ("maxOffsetsPerTrigger",)),
    Option("selector", Side.READ, "string", None,
           "stream reads: a JMS selector; on a topic, the cursor's subscription's selector",
           _text, "selector"),
    Option("numPartitions", Side.READ, "integer", 2,
           "tasks per batch (at least), each reading a sub-range", _positive, "partitions",
           ("minPartitions",)),
    Option("leaseMs", Side.READ, "integer (ms)", 0,
           "how long a cursor outlives its driver's connection (0: the broker's 60 000)",
           _count, "lease_ms"),
    Option("pageMessages", Side.READ, "integer", 4096, "messages per fetch page",
           _positive, "page_messages"),
    Option("checkpointLocation", Side.WRITE, "path", None,
           "Spark's own (writeStream): the query's checkpoint", _text, None),
    Option("queryName", Side.WRITE, "string", None,
           "Spark's own (writeStream.queryName)", _text, None),
)
"""Every option the source and the sink accept, declared once."""
# fmt: on

_BY_KEY: Final = {key.lower(): o for o in OPTIONS for key in (o.name, *o.aliases)}

NOT_YET: Final = {
    "minoffsetspertrigger": "use maxMessagesPerTrigger and a trigger interval",
    "maxtriggerdelay": "use a trigger interval",
    "startingoffsetsbytimestamp": "use startingTimestamp (one time for every stream)",
    "endingtimestamp": "use endingOffsets (offsets, or latest)",
    "endingoffsetsbytimestamp": "use endingOffsets (offsets, or latest)",
    "assign": "name the streams with option destination (stream:a,stream:b)",
    "topic": "name the destination with option destination (topic:NAME)",
    "groupidprefix": "use cursor to name what the query reads with",
    "includeheaders": "the read always has the headers and properties as columns",
    "maxrecordsperpartition": "use numPartitions",
}
"""Option names of Spark's Kafka source and sink that chute does not support (yet)."""

_PATH_HINT: Final = (
    'format("chute") takes no path: give the destination with option("destination", ...)'
)


@dataclass(frozen=True)
class ChuteOptions:
    """Every option of the ``chute`` data source, parsed once (picklable).

    Build it with :meth:`parse`; each field's default is in :data:`OPTIONS`.
    """

    url: str
    destinations: tuple[str, ...]
    login: str | None
    password: str | None = field(repr=False)  # never in a traceback or a log line
    tls_ca: str | None
    tls_verify: bool
    tls_cert: str | None
    tls_key: str | None
    timeout_ms: int
    cursor: str | None
    starting: str
    starting_timestamp: int | None
    ending: str
    fail_on_loss: bool
    pattern: str | None
    max_per_trigger: int
    selector: str | None
    partitions: int
    lease_ms: int
    page_messages: int
    given: frozenset[str]  # the names (as in OPTIONS) of the options the user gave

    @classmethod
    def parse(cls, options: Mapping[str, Any], side: Side = Side.READ) -> ChuteOptions:
        """Check and type ``options`` for a read or a write (``side``).

        Raises:
            OptionError: an unknown option, one of the other side, one of Kafka's
                that chute does not support, a missing destination (reads) or a
                malformed value.
        """
        values: dict[str, Any] = {o.attr: o.default for o in OPTIONS if o.attr}
        given: dict[str, str] = {}
        for key, raw in options.items():
            option = _known(str(key), side)
            if option.name in given:
                raise OptionError(
                    f"options '{given[option.name]}' and '{key}' both set {option.name}: give one"
                )
            given[option.name] = str(key)
            if option.attr is not None and raw is not None:
                values[option.attr] = option.parse(option.name, str(raw))
        if values["url"] is None:
            values["url"] = DEFAULT_URL
        if side is Side.READ and not values["destinations"] and values["pattern"] is None:
            raise OptionError(
                'option "destination" is required (queue:NAME, topic:NAME or stream:NAME), or '
                "option pattern for streams"
            )
        return cls(**values, given=frozenset(given))

    @property
    def destination(self) -> str | None:
        """The one destination named (None: none).

        Raises:
            OptionError: several are named (only a read of streams takes several).
        """
        if len(self.destinations) > 1:
            raise OptionError(
                f"option destination names {len(self.destinations)} destinations: only a "
                "read of streams takes several; name one"
            )
        return self.destinations[0] if self.destinations else None

    @property
    def address(self) -> str:
        found = self.destination
        if found is None:
            raise OptionError(
                'option "destination" is required (queue:NAME, topic:NAME or stream:NAME)'
            )
        return found

    @property
    def streams(self) -> bool:
        """Whether this read is of streams (the Kafka-like source, chute.spark.streams)."""
        return self.pattern is not None or any(a.startswith("stream:") for a in self.destinations)

    def connect(self) -> BlockingConnection:
        """A new connection to the broker (callers close it)."""
        return connect(
            self.url,
            login=self.login,
            passcode=self.password,
            timeout=self.timeout_ms / 1000,
            tls_ca=self.tls_ca,
            tls_verify=self.tls_verify,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
        )

    @property
    def direct(self) -> bool:
        """Whether tasks may read a stream partition on its home node (chute.spark.homes):
        a ``chute://`` or ``chutes://`` URL, whose nodes' native addresses a client can use."""
        try:
            return parse_url(self.url).transport == TCP
        except ConnectError:
            return False

    @property
    def url_shown(self) -> str:
        """The URL as a log line shows it (never its password)."""
        try:
            return str(parse_url(self.url))
        except ConnectError:
            return "(a malformed URL)"

    def connect_node(self, node: str) -> BlockingConnection:
        """A new connection to one node, ``host:port`` (its native address), with the URL's
        scheme, credentials and TLS options, and no failover (callers close it).

        Raises:
            ConnectError: the node cannot be reached, or the URL is not ``chute://`` or
                ``chutes://``.
        """
        url = parse_url(self.url)
        if url.transport != TCP:
            raise ConnectError(f"{url} reaches no node by its native address")
        host, _, port = node.rpartition(":")
        if not host or not port.isdigit():
            raise ConnectError(f"not a node's address: {node!r}")
        one = url._replace(host=host.strip("[]"), port=int(port), others=(), failover_option=0.0)
        login, passcode = url.credentials(self.login, self.password)
        return connect(
            str(one),
            login=login,
            passcode=passcode,
            timeout=self.timeout_ms / 1000,
            tls_ca=self.tls_ca,
            tls_verify=self.tls_verify,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
        )

    def connect_retrying(self, patience: float = RECONNECT_S) -> BlockingConnection:
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


def known_names(side: Side) -> list[str]:
    """The documented names of the options of ``side`` (reads or writes)."""
    return [o.name for o in OPTIONS if o.side & side]


def _known(key: str, side: Side) -> Option:
    """The declared option ``key`` names, or an OptionError that says what to do."""
    lowered = key.lower()
    what = "read" if side is Side.READ else "write"
    option = _BY_KEY.get(lowered)
    if option is not None:
        if not option.side & side:
            other = "writes (the sink)" if option.side is Side.WRITE else "reads (the source)"
            raise OptionError(f"option '{key}' applies to {other} only: remove it from the {what}")
        return option
    if lowered == "path":
        raise OptionError(_PATH_HINT)
    if lowered in NOT_YET or lowered.startswith("kafka."):
        hint = NOT_YET.get(lowered) or (
            "chute is not Kafka: connect with url, login, password and the tls* options"
        )
        raise OptionError(
            f"option '{key}' of Spark's Kafka connector is not supported by chute yet: {hint}"
        )
    keys = {k: o.name for k, o in _BY_KEY.items() if o.side & side}
    close = difflib.get_close_matches(lowered, list(keys), n=1, cutoff=0.6)
    suggestion = f" (did you mean '{keys[close[0]]}'?)" if close else ""
    raise OptionError(
        f"unknown option '{key}' for a chute {what}{suggestion}; "
        f"the options of a {what} are: {', '.join(known_names(side))}"
    )


# -- redaction ----------------------------------------------------------------------------

OPTIONS_REDACTION: Final = "spark.sql.redaction.options.regex"
_SPARK_DEFAULT_OPTIONS_REDACTION: Final = "(?i)url"


def with_passcode(regex: str | None) -> str:
    """``regex`` (Spark's ``spark.sql.redaction.options.regex``) extended so that it also
    matches the option key ``passcode``; unchanged if it matches already."""
    current = regex or _SPARK_DEFAULT_OPTIONS_REDACTION
    try:
        if re.search(_java_to_python(current), "passcode"):
            return current
    except re.error:
        pass  # a Java-only construct: extend it anyway
    return f"{current}|(?i)passcode"


def _java_to_python(regex: str) -> str:
    # Java accepts a global (?i) anywhere; Python only at the start.
    flags = "(?i)" if "(?i)" in regex else ""
    return flags + regex.replace("(?i)", "")


def redact_passcode(spark: Any) -> None:
    """Make Spark redact the ``passcode`` option's value in plans, as it does ``password``
    (by extending the session's ``spark.sql.redaction.options.regex``)."""
    current = spark.conf.get(OPTIONS_REDACTION)
    extended = with_passcode(current)
    if extended != current:
        spark.conf.set(OPTIONS_REDACTION, extended)
