"""The packets of chute's native protocol (after JBoss Messaging 2.0's), as plain frozen data.

Theory of operation
-------------------
Every packet travels as a fixed header followed by a body (see
:mod:`chute.protocol.spec` and :mod:`chute.protocol.splice` for the bytes)::

    length u32 | version u8 | type u8 | correlation u32 | target u32 | callback u32 | body

* ``correlation`` pairs a request with its response (``Ok``, ``Error`` or a
  ``...Result``); 0 means one-way: nobody waits for an answer.
* ``target`` names the handler on the receiving side: 0 is the connection,
  anything else a session id or a consumer id. The client allocates session
  and consumer ids from one counter per connection, so one id never names
  both a session and a consumer.
* ``callback`` names the handler on the sender side that later packets should
  target (``ConsumerOpen`` gives the consumer id that ``Deliver`` will target).

A packet field that *is* a handler id is carried in the header, not repeated
in the body: ``Send.session_id`` is the header's target, ``ConsumerOpen``'s
``session_id`` the target and its ``consumer_id`` the callback, and so on.
:class:`Header` holds what the header says; when decoding, those fields are
filled from it, and when encoding, the codec puts them into it.

Packets are immutable and cheap to build; ``Send`` and ``Deliver`` also carry
the raw bytes of the message *content* (everything the producer chose: id,
priority, persistent, kind, correlation id, reply-to, type, properties, body)
so that the broker can forward what it received without encoding it again.

The management packets (browsing, statistics, deleting, purging, moving) live
in :mod:`chute.protocol.manage_packets`, the cursor packets (Spark's reads by
sequence number) in :mod:`chute.protocol.cursor_packets`, the transactions' (local
and two-phase) in :mod:`chute.protocol.tx_packets`, the cluster's in
:mod:`chute.protocol.peer_packets`; this module re-exports
them, so every packet is ``packets.<Name>``, and :data:`Packet` and
:class:`PacketType` list them all.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from chute.message import Message
from chute.protocol.cursor_packets import (
    CursorAck,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    CursorPage,
)
from chute.protocol.manage_packets import (
    Browse,
    BrowseFetch,
    BrowsePage,
    BrowseResult,
    CallbackCreate,
    DeadLetterRetry,
    DeadLetterRetryResult,
    DestinationCreate,
    DestinationDelete,
    DestinationPurge,
    Move,
    Stat,
    StatFetch,
    StatPage,
    StatResult,
    TempQueue,
    TempQueueCreated,
    Unsubscribe,
)
from chute.protocol.peer_packets import (
    PeerConfirm,
    PeerDemand,
    PeerHandover,
    PeerHandovers,
    PeerOpen,
    PeerRefuse,
    PeerRelease,
    PeerResume,
)
from chute.protocol.peer_stats import PeerStatsFetch, PeerStatsPage
from chute.protocol.peer_stream_packets import PeerStreamRead, PeerStreamRecords
from chute.protocol.tx_packets import (
    Commit,
    Rollback,
    XaCommit,
    XaCommitBatch,
    XaPrepare,
    XaRecover,
    XaRollback,
)

PROTOCOL_VERSION: Final = 4
"""The newest protocol version this code speaks (2 adds :class:`Held`, 3 the packets
between the nodes of a cluster: :mod:`chute.protocol.peer_packets`, 4 the producer a
:class:`SessionOpen` may name)."""
MIN_PROTOCOL_VERSION: Final = 1
"""The oldest protocol version this code speaks."""
HELD_VERSION: Final = 2
"""The first version whose clients are told with :class:`Held` that a request waits."""
PEER_VERSION: Final = 3
"""The first version with the packets between nodes; a node dials another at it only."""
PRODUCER_VERSION: Final = 4
"""The first version whose :class:`SessionOpen` may name its producer."""
SUPPORTED_VERSIONS: Final = frozenset(range(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION + 1))


def negotiate_version(min_version: int, max_version: int) -> int | None:
    """The newest version both sides speak, or None if the ranges do not meet."""
    for version in range(min(max_version, PROTOCOL_VERSION), min_version - 1, -1):
        if version in SUPPORTED_VERSIONS:
            return version
    return None


class PacketType(enum.IntEnum):
    """Stable wire tags of the packet types (never renumber; add at the end of a group)."""

    CONNECT = 1
    CONNECTED = 2
    PING = 3
    PONG = 4
    DISCONNECT = 5
    ERROR = 6
    OK = 7
    HELD = 8
    SESSION_OPEN = 10
    SESSION_CLOSE = 11
    SEND = 20
    CONSUMER_OPEN = 21
    CONSUMER_CLOSE = 22
    DELIVER = 23
    ACK = 24
    NACK = 25
    CREDIT = 26
    SEND_MANY = 27
    COMMIT = 30
    ROLLBACK = 31
    XA_PREPARE = 32
    XA_COMMIT = 33
    XA_ROLLBACK = 34
    XA_RECOVER = 35
    XA_COMMIT_BATCH = 36
    BROWSE = 40
    BROWSE_RESULT = 41
    STAT = 42
    STAT_RESULT = 43
    UNSUBSCRIBE = 44
    TEMP_QUEUE = 45
    TEMP_QUEUE_CREATED = 46
    CALLBACK_CREATE = 47
    DESTINATION_DELETE = 48
    DESTINATION_PURGE = 49
    CURSOR_OPEN = 50
    CURSOR_INFO = 51
    CURSOR_FETCH = 52
    CURSOR_PAGE = 53
    CURSOR_ACK = 54
    CURSOR_CLOSE = 55
    BROWSE_FETCH = 60
    BROWSE_PAGE = 61
    STAT_FETCH = 62
    STAT_PAGE = 63
    MOVE = 64
    DEAD_LETTER_RETRY = 65
    DEAD_LETTER_RETRY_RESULT = 66
    STREAM_CONSUMER_OPEN = 67
    DESTINATION_CREATE = 68
    PEER_OPEN = 70
    PEER_RESUME = 71
    PEER_HANDOVER = 72
    PEER_CONFIRM = 73
    PEER_REFUSE = 74
    PEER_RELEASE = 75
    PEER_DEMAND = 76
    PEER_STREAM_READ = 77
    PEER_STREAM_RECORDS = 78
    PEER_HANDOVERS = 79
    PEER_STATS_FETCH = 80
    PEER_STATS_PAGE = 81


class SessionAckMode(enum.StrEnum):
    """How a session's consumers acknowledge (DESIGN.md, Delivery semantics)."""

    AUTO = "auto"
    """The client acks as the application takes messages (returning credit)."""
    CLIENT = "client"
    """``ack`` of one message acks every earlier delivery of its consumer (cumulative)."""
    INDIVIDUAL = "individual"
    """``ack`` acks exactly one message."""


class Header(NamedTuple):
    """The routing part of a packet's header (length and type are the codec's business).

    A NamedTuple rather than a dataclass: one is built per packet on the hot path.
    """

    version: int = PROTOCOL_VERSION
    correlation_id: int = 0
    target_id: int = 0
    callback_id: int = 0


NO_HEADER: Final = Header()


# -- connection ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connect:
    """Client → server, first packet. Target 0.

    The header's version is ignored for CONNECT, CONNECTED and ERROR: their
    bodies never change, so that two peers can always negotiate.
    """

    min_version: int = MIN_PROTOCOL_VERSION
    max_version: int = PROTOCOL_VERSION
    client_id: str | None = None
    login: str | None = None
    passcode: str | None = None
    heartbeat_ms: int = 0
    """How often the client would like to hear from the server; 0 = no heartbeats."""


@dataclass(frozen=True, slots=True)
class Connected:
    """Server → client, response to Connect (same correlation id)."""

    version: int
    connection_id: str
    heartbeat_ms: int = 0
    """How often the server will ping when idle (and expects the client to); 0 = never."""
    max_packet_size: int = 16 << 20


@dataclass(frozen=True, slots=True)
class Ping:
    """Heartbeat; either side may send it, the other answers Pong (same correlation id)."""


@dataclass(frozen=True, slots=True)
class Pong:
    """Answer to Ping."""


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Graceful close: the sender sends nothing more. With a correlation id the
    server answers Ok once everything before it was handled."""


@dataclass(frozen=True, slots=True)
class Error:
    """A failed request (same correlation id as the request), or unsolicited.

    Unsolicited errors have correlation 0: with target 0 the error is about the
    whole connection and the sender closes it; with a session id as target it
    reports a failed one-way packet of that session (the client raises it from
    its next call on the session); with a consumer id, a problem of that
    consumer (raised from its next receive).
    """

    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class Ok:
    """Generic success response; ``value`` is an optional small result."""

    value: str | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """Server → client (version 2 on), same correlation id as a request the broker
    holds: a send waiting for room (the broker over its memory or disk limit, or a
    full destination under ``overflow = block``). Not the answer: that comes once
    there is room, or as an Error after ``timeout_ms``; a request woken and held
    again is told again. A client waits ``timeout_ms`` longer for the answer.
    """

    reason: str
    """What holds it, as the error after ``timeout_ms`` would say."""
    timeout_ms: int
    """How long at most, from now, the broker holds it before it answers with an error."""


# -- sessions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionOpen:
    """Open a session. Target 0; ``session_id`` (chosen by the client) is the callback.

    ``producer`` (version 4 on; left off the wire when None) names who produces on the
    session, for duplicate detection: the broker drops a persistent send outside a
    transaction whose message id this producer stored lately, and confirms it."""

    session_id: int
    ack_mode: SessionAckMode = SessionAckMode.AUTO
    transacted: bool = False
    producer: str | None = None


@dataclass(frozen=True, slots=True)
class SessionClose:
    """Close a session and its consumers. ``session_id`` is the target."""

    session_id: int


@dataclass(frozen=True, slots=True)
class Send:
    """Produce one message. ``session_id`` is the target.

    One-way when the correlation id is 0; otherwise the server answers Ok or
    Error (for a persistent message only once the store made it durable).
    ``ttl_ms`` of 0 means the message never expires. ``content`` holds the raw
    encoded message content when the packet was decoded (or pre-encoded), for
    :func:`chute.protocol.splice.encode_deliver`.
    """

    session_id: int
    address: str
    message: Message
    ttl_ms: int = 0
    content: bytes | None = field(default=None, compare=False, repr=False)


SEND_MANY_MAX: Final = 4096
"""The most messages one SendMany carries (a peer that sends more breaks the protocol):
what one packet makes the broker decode at once stays small, however small the
messages."""


@dataclass(frozen=True, slots=True)
class SendMany:
    """Produce several messages to one address in one request. ``session_id`` is the
    target.

    The same as a Send of each in order, but applied together: in a transacted
    session they join its transaction; outside one they are stored together (all
    or none), and a request is answered once all are (durable ones after the sync).
    Each message's ``encoded`` holds its content block as it came.
    """

    session_id: int
    address: str
    messages: tuple[Message, ...]
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerOpen:
    """Open a consumer. ``session_id`` is the target, ``consumer_id`` the callback.

    The consumer starts with ``prefetch`` credits: the server delivers at most
    that many messages before the client returns credit (Ack or Credit).
    """

    session_id: int
    consumer_id: int
    address: str
    selector: str | None = None
    prefetch: int = 100
    exclusive: bool = False
    subscription: str | None = None
    durable: bool = False
    shared: bool = False


@dataclass(frozen=True, slots=True)
class StreamConsumerOpen:
    """Open a consumer on a stream, reading from ``offset`` (``first``, ``last``,
    ``next``, a number or ``timestamp=MS``) without consuming; answered as ConsumerOpen.
    Each delivery's ``seq`` is the message's offset in the stream."""

    session_id: int
    consumer_id: int
    address: str
    offset: str
    selector: str | None = None
    prefetch: int = 100


@dataclass(frozen=True, slots=True)
class ConsumerClose:
    """Close a consumer; its unacked messages are redelivered. ``consumer_id`` is the target."""

    consumer_id: int


@dataclass(frozen=True, slots=True)
class Deliver:
    """Server → client: one message for a consumer. ``consumer_id`` is the target.

    ``seq`` is the ack identity of this delivery (increasing per consumer, in
    delivery order). The broker-assigned fields travel here, outside the
    content block, and are also set on ``message``. ``content`` may hold the
    pre-encoded content block when sending; a decoded Deliver leaves it None.
    """

    consumer_id: int
    seq: int
    delivery_count: int
    redelivered: bool
    timestamp: int
    expiration: int
    message: Message
    content: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge delivery ``seq`` (and with ``cumulative``, all earlier ones of the
    consumer), and grant ``credit`` more messages. ``consumer_id`` is the target."""

    consumer_id: int
    seq: int
    cumulative: bool = False
    credit: int = 0


@dataclass(frozen=True, slots=True)
class Nack:
    """Refuse delivery ``seq``: requeue it (redelivered later) or reject it (dead letter)."""

    consumer_id: int
    seq: int
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class Credit:
    """Grant a consumer ``credit`` more messages without acking. ``consumer_id`` is the target."""

    consumer_id: int
    credit: int


Packet = (
    Connect
    | Connected
    | Ping
    | Pong
    | Disconnect
    | Error
    | Ok
    | Held
    | SessionOpen
    | SessionClose
    | Send
    | SendMany
    | ConsumerOpen
    | ConsumerClose
    | StreamConsumerOpen
    | Deliver
    | Ack
    | Nack
    | Credit
    | Commit
    | Rollback
    | XaPrepare
    | XaCommit
    | XaRollback
    | XaRecover
    | XaCommitBatch
    | Browse
    | BrowseResult
    | Stat
    | StatResult
    | Unsubscribe
    | TempQueue
    | TempQueueCreated
    | CallbackCreate
    | DestinationCreate
    | DestinationDelete
    | DestinationPurge
    | CursorOpen
    | CursorInfo
    | CursorFetch
    | CursorPage
    | CursorAck
    | CursorClose
    | BrowseFetch
    | BrowsePage
    | StatFetch
    | StatPage
    | Move
    | DeadLetterRetry
    | DeadLetterRetryResult
    | PeerOpen
    | PeerResume
    | PeerHandover
    | PeerHandovers
    | PeerConfirm
    | PeerRefuse
    | PeerRelease
    | PeerDemand
    | PeerStreamRead
    | PeerStreamRecords
    | PeerStatsFetch
    | PeerStatsPage
)
"""Any packet of the native protocol."""

__all__ = [
    "HELD_VERSION",
    "MIN_PROTOCOL_VERSION",
    "NO_HEADER",
    "PEER_VERSION",
    "PRODUCER_VERSION",
    "PROTOCOL_VERSION",
    "SEND_MANY_MAX",
    "SUPPORTED_VERSIONS",
    "Ack",
    "Browse",
    "BrowseFetch",
    "BrowsePage",
    "BrowseResult",
    "CallbackCreate",
    "Commit",
    "Connect",
    "Connected",
    "ConsumerClose",
    "ConsumerOpen",
    "Credit",
    "CursorAck",
    "CursorClose",
    "CursorFetch",
    "CursorInfo",
    "CursorOpen",
    "CursorPage",
    "DeadLetterRetry",
    "DeadLetterRetryResult",
    "Deliver",
    "DestinationCreate",
    "DestinationDelete",
    "DestinationPurge",
    "Disconnect",
    "Error",
    "Header",
    "Held",
    "Move",
    "Nack",
    "Ok",
    "Packet",
    "PacketType",
    "PeerConfirm",
    "PeerDemand",
    "PeerHandover",
    "PeerHandovers",
    "PeerOpen",
    "PeerRefuse",
    "PeerRelease",
    "PeerResume",
    "PeerStatsFetch",
    "PeerStatsPage",
    "PeerStreamRead",
    "PeerStreamRecords",
    "Ping",
    "Pong",
    "Rollback",
    "Send",
    "SendMany",
    "SessionAckMode",
    "SessionClose",
    "SessionOpen",
    "Stat",
    "StatFetch",
    "StatPage",
    "StatResult",
    "StreamConsumerOpen",
    "TempQueue",
    "TempQueueCreated",
    "Unsubscribe",
    "XaCommit",
    "XaCommitBatch",
    "XaPrepare",
    "XaRecover",
    "XaRollback",
    "negotiate_version",
]
