"""What a read may be: batch reads are queue snapshots, stream reads name their cursor,
and what a stopping stream reader may consume (docs/spark.md, "Reading queues and topics")."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import StructType

from chute.spark.datasource import ChuteDataSource
from chute.spark.options import ChuteOptions, OptionError
from chute.spark.source import ChuteBatchReader, ChuteStreamReader

SCHEMA = StructType()  # the readers ignore it


def source(**options: str) -> ChuteDataSource:
    return ChuteDataSource({"url": "chute://127.0.0.1:1", **options})


def test_a_stream_read_without_a_cursor_says_why_it_needs_one() -> None:
    with pytest.raises(
        OptionError, match=r'stream read of queue:orders needs option "cursor"'
    ) as info:
        source(destination="queue:orders").streamReader(SCHEMA)
    message = str(info.value)
    assert "Spark does not tell a source which query" in message
    assert "keep it across restarts" in message
    reader = source(destination="topic:t", cursor="job-1").streamReader(SCHEMA)
    assert isinstance(reader, ChuteStreamReader)
    assert reader.cursor == "job-1"


def test_a_batch_read_of_a_topic_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(OptionError, match="topic:news is a topic") as info:
        source(destination="topic:news").reader(SCHEMA)
    assert "Stream the topic" in str(info.value)


@pytest.mark.parametrize(
    ("option", "hint"), [("cursor", "takes no cursor"), ("selector", "filter")]
)
def test_a_batch_read_is_a_snapshot_without_cursor_or_selector(option: str, hint: str) -> None:
    with pytest.raises(OptionError, match=hint):
        source(destination="queue:q", **{option: "x = 1"}).reader(SCHEMA)
    assert isinstance(source(destination="queue:q").reader(SCHEMA), ChuteBatchReader)


class Stub(ChuteStreamReader):
    """A stream reader whose broker always says (earliest 1, head ``self.head``)."""

    head = 1

    def _open(self) -> tuple[int, int]:
        return 1, self.head


def test_stop_may_consume_only_what_spark_committed() -> None:
    reader = Stub(ChuteOptions.parse({"destination": "q", "cursor": "c"}))
    assert reader.initialOffset() == {"seq": 1}
    reader.head = 11
    assert reader.latestOffset({"seq": 1}, ReadAllAvailable()) == {"seq": 11}
    assert reader._done == 0  # the initial offset: nothing read below it
    reader.head = 15
    assert reader.latestOffset({"seq": 11}, ReadAllAvailable()) == {"seq": 15}
    assert reader._done == 11  # batch [1, 11) was committed before [11, 15) is planned


def test_a_restarted_reader_trusts_the_checkpoints_start() -> None:
    reader = Stub(ChuteOptions.parse({"destination": "q", "cursor": "c"}))
    reader.head = 30
    reader.latestOffset({"seq": 20}, ReadAllAvailable())  # no initialOffset: a restart
    assert reader._done == 20
