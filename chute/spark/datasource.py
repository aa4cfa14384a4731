"""The ``chute`` DataSource: Spark asks it for readers and writers (planning workers).

It also holds the rules of what a read may be (docs/spark.md, "Reading queues and
topics"): a read of streams is Kafka-like (:mod:`chute.spark.streams`: offsets in
Spark's checkpoint, several streams or a pattern); of a queue, a batch read is a
snapshot, taking no cursor, and a stream read consumes through a cursor the user
names.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from chute.spark.options import ChuteOptions, OptionError, Side
from chute.spark.schema import READ_SCHEMA, STREAM_READ_SCHEMA
from chute.spark.sink import ChuteBatchWriter, ChuteStreamWriter
from chute.spark.source import ChuteBatchReader, ChuteStreamReader
from chute.spark.streams import StreamBatchReader, StreamSource


class ChuteDataSource(DataSource):
    """Options: docs/spark.md. Columns of a read: :data:`chute.spark.schema.READ_SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        return "chute"

    def schema(self) -> str:
        # Spark asks for the schema of reads only, at load(): check their options there.
        if _of_streams(ChuteOptions.parse(self.options, Side.READ)):
            return STREAM_READ_SCHEMA
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ChuteOptions.parse(self.options, Side.READ)
        if _of_streams(options):
            return StreamBatchReader(options)
        if options.address.startswith("topic:"):
            raise OptionError(TOPIC_BATCH_READ.format(address=options.address))
        for name in ("cursor", "selector"):
            if name in options.given:
                raise OptionError(SNAPSHOT_ONLY[name])
        return ChuteBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = ChuteOptions.parse(self.options, Side.READ)
        if _of_streams(options):
            return StreamSource(options)
        if options.cursor is None:
            raise OptionError(CURSOR_REQUIRED.format(address=options.address))
        return ChuteStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return ChuteBatchWriter(ChuteOptions.parse(self.options, Side.WRITE))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        return ChuteStreamWriter(ChuteOptions.parse(self.options, Side.WRITE))


TOPIC_BATCH_READ: Final = (
    "{address} is a topic: a batch read of a topic is not supported, because a topic keeps "
    "messages only for the subscriptions that existed when they were published (a batch "
    "read would find nothing, and would leave a subscription behind). Stream the topic "
    "(spark.readStream with option cursor: the query's subscription keeps what is "
    "published while it is down), or read a queue the messages are sent to"
)
SNAPSHOT_ONLY: Final = {
    "cursor": "a batch read (spark.read) is a snapshot of a queue: it consumes nothing and "
    "takes no cursor (a cursor would hold the queue from other consumers). Remove option "
    "cursor, or use spark.readStream to consume the queue through the cursor",
    "selector": "a batch read (spark.read) is a snapshot of a queue and does not filter: "
    "remove option selector and filter the DataFrame (e.g. where(properties['k'] = 'v')), "
    "or use spark.readStream, whose cursor applies the selector",
}
CURSOR_REQUIRED: Final = (
    'a stream read of {address} needs option "cursor": the name under which the broker '
    "keeps this query's place (on a queue its hold and what it consumed, on a topic its "
    "subscription). Give each query its own name and keep it across restarts of the query "
    "(e.g. the query's name): Spark does not tell a source which query or checkpoint it "
    "belongs to, so chute cannot choose one, and two queries sharing a name would share "
    "(split) the messages"
)


STREAM_ONLY: Final = ("pattern", "startingTimestamp", "endingOffsets", "failOnDataLoss")
"""Options that apply to reads of streams only."""

STREAM_REFUSES: Final = {
    "cursor": "streams keep no cursor: a query's offsets live in its checkpoint, and any "
    "number of queries read a stream independently. Remove option cursor",
    "selector": "a read of streams does not filter: remove option selector and filter the "
    "DataFrame (e.g. where(properties['k'] = 'v'))",
    "leaseMs": "streams hold nothing for a reader: remove option leaseMs",
}


def _of_streams(options: ChuteOptions) -> bool:
    """Whether the read is of streams (checking the options that go with either kind).

    Raises:
        OptionError: streams mixed with a queue or topic; an option of the other kind.
    """
    if not options.streams:
        for name in STREAM_ONLY:
            if name in options.given:
                raise OptionError(
                    f"option {name} applies to reads of streams only, not {options.address}"
                )
        if len(options.destinations) > 1:
            raise OptionError(
                "several destinations in one read must all be streams (stream:NAME): read "
                "queues and topics one per query"
            )
        return False
    others = [a for a in options.destinations if not a.startswith("stream:")]
    if others:
        raise OptionError(
            f"a read of streams cannot also read {', '.join(others)}: read queues and topics "
            "in a query of their own"
        )
    for name, why in STREAM_REFUSES.items():
        if name in options.given:
            raise OptionError(why)
    return True


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("the chute sink only appends messages: use mode('append')")
